package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/manifests"
)

// Generator is what the server needs of a loaded model; *engine.Engine is
// one.
type Generator interface {
	// Generate runs one request, calling onToken per emitted token.
	Generate(ctx context.Context, req engine.Request, onToken func(engine.Token) error) (*engine.Response, error)
	// Free releases the model's memory; it is not used afterwards.
	Free(ctx context.Context) error
}

// Loader loads the model a manifest describes.
type Loader func(ctx context.Context, manifest string) (Generator, error)

// modelInfo is what the server knows of a model without loading it.
type modelInfo struct {
	Name     string
	Manifest string // path of the manifest file
	M        *manifests.Manifest
	Digest   string // sha256 of the manifest file
	Modified time.Time
	Size     int64 // bytes of the target's and draft's safetensors files
}

// readModelInfo reads and validates a manifest (no weights are read).
func readModelInfo(path string) (*modelInfo, error) {
	m, err := manifests.Load(path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	info := &modelInfo{Name: m.Name, Manifest: path, M: m, Digest: hex.EncodeToString(sum[:]), Modified: st.ModTime()}
	dirs := []string{m.Target.Dir}
	if m.Draft != nil {
		dirs = append(dirs, m.Draft.Dir)
	}
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		for _, f := range files {
			if st, err := os.Stat(f); err == nil {
				info.Size += st.Size()
			}
		}
	}
	return info, nil
}

// job is one queued request: its context, the engine request, and the
// channels the model's worker answers on.
type job struct {
	ctx       context.Context
	req       engine.Request
	keepAlive *time.Duration // nil: the server's default
	// op is what the job asks: generate, or only load / unload the model
	// (ollama's empty prompt).
	op       jobOp
	enqueued time.Time

	tokens chan engine.Token // emitted tokens, in order
	done   chan jobResult    // one result, after the last token
}

type jobOp int

const (
	opGenerate jobOp = iota
	opLoad
	opUnload
)

// tokenBuffer is how many tokens the worker may run ahead of a slow client
// before it waits for the client (the MLX worker serves every model, so a
// stalled client must not hold it for long: its context ends the wait).
const tokenBuffer = 256

// jobResult is how a job ended.
type jobResult struct {
	resp *engine.Response
	err  error
	// Load is the time this job spent loading the model (0 when loaded).
	Load time.Duration
	// Queued is the time the job waited before its model's worker took it.
	Queued time.Duration
}

// slot is one model: its static info, its queue and, while loaded, its
// Generator. One worker goroutine serves the queue in FIFO order, one
// request at a time, and unloads the model when its keep-alive ends.
type slot struct {
	info  *modelInfo
	queue chan *job
	srv   *Server

	mu        sync.Mutex
	gen       Generator
	loadedAt  time.Time
	expiresAt time.Time // zero: kept until shutdown
	busy      bool
	avg       time.Duration // moving average of a request's service time
}

// busyError is the answer when the model's queue is full: 503 with a
// Retry-After of about the time the queue takes to drain.
func (s *slot) busyError() *apiError {
	s.mu.Lock()
	wait := s.avg * time.Duration(cap(s.queue)+1)
	s.mu.Unlock()
	wait = min(max(wait, time.Second), time.Minute)
	return &apiError{Status: http.StatusServiceUnavailable, RetryAfter: wait,
		Message: fmt.Sprintf("server busy: model %q has %d requests waiting (the maximum, --max-queue); retry later", s.info.Name, cap(s.queue))}
}

// submit queues j without blocking.
func (s *slot) submit(j *job) error {
	j.enqueued = time.Now()
	select {
	case s.queue <- j:
		s.srv.metrics.queueDepth.add(1)
		return nil
	default:
		return s.busyError()
	}
}

// run is the model's worker: it serves jobs until ctx ends, then unloads.
func (s *slot) run(ctx context.Context) {
	var expire <-chan time.Time
	var timer *time.Timer
	stopTimer := func() {
		if timer != nil {
			timer.Stop()
			timer, expire = nil, nil
		}
	}
	for {
		select {
		case <-ctx.Done():
			stopTimer()
			s.drain()
			s.unload("shutdown")
			return
		case <-expire:
			timer, expire = nil, nil
			s.unload("keep-alive expired")
		case j := <-s.queue:
			s.srv.metrics.queueDepth.add(-1)
			stopTimer()
			keep := s.serve(ctx, j)
			s.srv.noteMemory()
			switch {
			case keep == 0 && len(s.queue) == 0:
				s.unload("keep_alive 0")
			case keep > 0:
				timer = time.NewTimer(keep)
				expire = timer.C
			}
		}
	}
}

// drain answers every queued job with a shutdown error.
func (s *slot) drain() {
	for {
		select {
		case j := <-s.queue:
			s.srv.metrics.queueDepth.add(-1)
			j.done <- jobResult{err: &apiError{Status: http.StatusServiceUnavailable, Message: "the server is shutting down"}}
		default:
			return
		}
	}
}

func (s *slot) setExpiry(t time.Time) {
	s.mu.Lock()
	s.expiresAt = t
	s.mu.Unlock()
}

// serve runs one job and returns the keep-alive that applies after it.
func (s *slot) serve(ctx context.Context, j *job) time.Duration {
	keep := s.srv.cfg.KeepAlive
	if j.keepAlive != nil {
		keep = *j.keepAlive
	}
	res := jobResult{Queued: time.Since(j.enqueued)}
	defer func() {
		// The expiry is set before the answer, so /api/ps right after a
		// request shows it.
		switch {
		case keep < 0:
			s.setExpiry(time.Time{})
		case keep > 0:
			s.setExpiry(time.Now().Add(keep))
		}
		j.done <- res
	}()
	if err := j.ctx.Err(); err != nil {
		res.err = err // the client left while the job waited
		return keep
	}
	if j.op == opUnload {
		s.unload("keep_alive 0")
		return 0
	}
	gen, load, err := s.load(ctx)
	res.Load = load
	if err != nil {
		res.err = err
		return keep
	}
	if j.op == opLoad {
		return keep
	}
	s.mu.Lock()
	s.busy = true
	s.mu.Unlock()
	start := time.Now()
	resp, err := gen.Generate(j.ctx, j.req, func(t engine.Token) error {
		select {
		case j.tokens <- t:
			return nil
		case <-j.ctx.Done():
			return j.ctx.Err()
		}
	})
	s.mu.Lock()
	s.busy = false
	took := time.Since(start)
	if s.avg == 0 {
		s.avg = took
	} else {
		s.avg = (s.avg*7 + took) / 8
	}
	s.mu.Unlock()
	res.resp, res.err = resp, err
	return keep
}

// load returns the loaded model, loading it first if needed.
func (s *slot) load(ctx context.Context) (Generator, time.Duration, error) {
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	if gen != nil {
		return gen, 0, nil
	}
	start := time.Now()
	gen, err := s.srv.cfg.Load(ctx, s.info.Manifest)
	took := time.Since(start)
	if err != nil {
		s.srv.log.Error("loading a model failed", "model", s.info.Name, "manifest", s.info.Manifest, "err", err)
		return nil, took, fmt.Errorf("loading model %q from %s: %w", s.info.Name, s.info.Manifest, err)
	}
	s.mu.Lock()
	s.gen, s.loadedAt = gen, time.Now()
	s.mu.Unlock()
	s.srv.metrics.loaded.add(1)
	s.srv.log.Info("model loaded", "model", s.info.Name, "seconds", took.Seconds())
	return gen, took, nil
}

// unload frees the model if it is loaded.
func (s *slot) unload(why string) {
	s.mu.Lock()
	gen := s.gen
	s.gen, s.expiresAt = nil, time.Time{}
	s.mu.Unlock()
	if gen == nil {
		return
	}
	if err := gen.Free(context.Background()); err != nil {
		s.srv.log.Warn("unloading a model", "model", s.info.Name, "err", err)
	}
	s.srv.metrics.loaded.add(-1)
	s.srv.noteMemory()
	s.srv.log.Info("model unloaded", "model", s.info.Name, "reason", why)
}

// status is a snapshot of a slot for /api/ps.
type slotStatus struct {
	loaded    bool
	loadedAt  time.Time
	expiresAt time.Time
}

func (s *slot) status() slotStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slotStatus{loaded: s.gen != nil, loadedAt: s.loadedAt, expiresAt: s.expiresAt}
}

// lookup finds a model by name; an ollama tag ":latest" is accepted.
func (srv *Server) lookup(name string) (*slot, error) {
	if name == "" {
		return nil, badRequest("model", "model is required: name one of the served models (GET /api/tags or /v1/models lists them)")
	}
	if s, ok := srv.slots[name]; ok {
		return s, nil
	}
	if s, ok := srv.slots[strings.TrimSuffix(name, ":latest")]; ok {
		return s, nil
	}
	return nil, &apiError{Status: http.StatusNotFound, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("model %q not found; served models: %s", name, strings.Join(srv.names(), ", "))}
}

// names lists the served models, sorted.
func (srv *Server) names() []string {
	out := make([]string, 0, len(srv.slots))
	for n := range srv.slots {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ManifestPaths expands the command line's arguments: manifest files, and
// folders whose *.toml files are manifests.
func ManifestPaths(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, a)
			continue
		}
		files, err := filepath.Glob(filepath.Join(a, "*.toml"))
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s holds no manifest (*.toml)", a)
		}
		sort.Strings(files)
		out = append(out, files...)
	}
	if len(out) == 0 {
		return nil, errors.New("no manifest given")
	}
	return out, nil
}

// logger returns l or slog.Default().
func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
