// Package server serves loaded manifests over HTTP in the two APIs local
// model users already speak: ollama's native API (/api/generate, /api/chat,
// NDJSON streams) and OpenAI's (/v1/chat/completions, /v1/completions, SSE
// streams). Both are thin codecs over one internal request: a handler
// decodes and validates, the model's worker runs the engine request, and the
// handler encodes what comes back. Every answer carries the request's
// speculation statistics in a "speculation" field; GET /metrics reports them
// in Prometheus form under vLLM's names.
//
// Each served model has one worker goroutine, a bounded FIFO queue (full:
// 503 with Retry-After), and is loaded on first use and unloaded after its
// keep-alive. A request's context travels with it: a client that goes away
// stops its generation at the next round.
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/specula-dev/specula/mlx"
)

// Version is reported by GET /api/version; cmd/specula sets it.
var Version = "0.1.0-dev"

// Config configures a Server.
type Config struct {
	// Manifests are the manifest files to serve; each is a model named by
	// its name field (names must be unique).
	Manifests []string
	// Load loads a model (nil: engine.Load with a prompt cache; see
	// EngineLoader).
	Load Loader
	// KeepAlive is how long a model stays loaded after its last request
	// when the request does not say: 0 unloads it at once, negative keeps
	// it until shutdown (ollama's default is DefaultKeepAlive).
	KeepAlive time.Duration
	// MaxQueue bounds the requests waiting per model (default 512, ollama's).
	MaxQueue int
	// MaxBodyBytes bounds a request body (default 16 MiB).
	MaxBodyBytes int64
	// MaxPromptTokens bounds a prompt in tokens (0: the model's context).
	MaxPromptTokens int
	// RequestTimeout bounds a request from arrival to its last token
	// (0: no bound).
	RequestTimeout time.Duration
	// StallTimeout bounds how long one write of a streamed answer may wait
	// on a client that reads nothing; past it the request is cancelled
	// (0: DefaultStallTimeout, negative: no bound).
	StallTimeout time.Duration
	// APIKey, when set, is required as "Authorization: Bearer <key>" on
	// every route but /health.
	APIKey string
	// Logger receives the request log (nil: slog.Default()).
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultKeepAlive    = 5 * time.Minute
	DefaultMaxQueue     = 512
	DefaultMaxBodyBytes = 16 << 20
	// DefaultStallTimeout is long enough for any client that reads at all
	// (a write waits only once the connection's buffers are full).
	DefaultStallTimeout = time.Minute
)

// Server serves the configured models.
type Server struct {
	cfg     Config
	log     *slog.Logger
	slots   map[string]*slot
	metrics *metrics
	mux     *http.ServeMux
	start   time.Time

	ctx    context.Context // ends the workers
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New reads and validates every manifest (no weights are read), and starts
// one worker per model. Close stops them.
func New(cfg Config) (*Server, error) {
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.Load == nil {
		cfg.Load = EngineLoader(DefaultPromptCacheBytes, nil)
	}
	srv := &Server{cfg: cfg, log: logger(cfg.Logger), slots: map[string]*slot{}, metrics: newMetrics(), start: time.Now()}
	for _, path := range cfg.Manifests {
		info, err := readModelInfo(path)
		if err != nil {
			return nil, err
		}
		if prev, dup := srv.slots[info.Name]; dup {
			return nil, fmt.Errorf("%s and %s both name the model %q: model names must be unique (the manifests' name fields)", prev.info.Manifest, path, info.Name)
		}
		srv.slots[info.Name] = &slot{info: info, queue: make(chan *job, cfg.MaxQueue), srv: srv}
	}
	if len(srv.slots) == 0 {
		return nil, errors.New("no model to serve: give at least one manifest")
	}
	srv.ctx, srv.cancel = context.WithCancel(context.Background())
	for _, s := range srv.slots {
		srv.wg.Add(1)
		go func() {
			defer srv.wg.Done()
			s.run(srv.ctx)
		}()
	}
	srv.routes()
	return srv, nil
}

// Close stops the workers: queued requests are answered 503, loaded models
// are freed. Generations still running should have been ended first (their
// contexts cancelled), or Close waits for them.
func (srv *Server) Close() {
	srv.cancel()
	srv.wg.Wait()
}

// Handler returns the HTTP handler of every route.
func (srv *Server) Handler() http.Handler { return srv.mux }

func (srv *Server) routes() {
	mux := http.NewServeMux()
	// ollama's native API.
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "specula is running")
	})
	mux.HandleFunc("HEAD /{$}", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /api/version", srv.handleVersion)
	mux.HandleFunc("GET /api/tags", srv.handleTags)
	mux.HandleFunc("POST /api/show", srv.handleShow)
	mux.HandleFunc("GET /api/ps", srv.handlePs)
	mux.HandleFunc("POST /api/generate", srv.handleGenerate)
	mux.HandleFunc("POST /api/chat", srv.handleChat)
	// OpenAI's API.
	mux.HandleFunc("GET /v1/models", srv.handleModels)
	mux.HandleFunc("GET /v1/models/{model...}", srv.handleModel)
	mux.HandleFunc("POST /v1/chat/completions", srv.handleChatCompletions)
	mux.HandleFunc("POST /v1/completions", srv.handleCompletions)
	// Operations.
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /metrics", srv.handleMetrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		err := &apiError{Status: http.StatusNotFound, Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)}
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			writeOpenAIError(w, err)
			return
		}
		writeOllamaError(w, err)
	})
	srv.mux = http.NewServeMux()
	srv.mux.Handle("/", srv.middleware(mux))
}

// middleware checks the API key, bounds the body and recovers a handler's
// panic into a 500 (the process keeps serving).
func (srv *Server) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		openAI := strings.HasPrefix(r.URL.Path, "/v1/")
		fail := func(err error) {
			if openAI {
				writeOpenAIError(w, err)
			} else {
				writeOllamaError(w, err)
			}
		}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				srv.log.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(p))
				fail(&apiError{Status: http.StatusInternalServerError, Message: fmt.Sprintf("internal error: %v", p)})
			}
		}()
		if srv.cfg.APIKey != "" && r.URL.Path != "/health" && !validKey(r, srv.cfg.APIKey) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="specula"`)
			fail(&apiError{Status: http.StatusUnauthorized, Message: "missing or wrong API key: send Authorization: Bearer <key> (the server's SPECULA_API_KEY)"})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, srv.cfg.MaxBodyBytes)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(rec, r)
		status := rec.status
		if r.Context().Err() != nil && status == http.StatusOK && !rec.wrote {
			status = StatusClientClosed
		}
		srv.log.Info("request", "method", r.Method, "path", r.URL.Path, "status", status,
			"ms", time.Since(start).Milliseconds(), "remote", r.RemoteAddr)
	})
}

// statusRecorder remembers the status a handler answered with. Unwrap lets
// http.ResponseController reach the connection's Flush.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(b)
}

// Unwrap returns the wrapped writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// validKey compares the bearer token with the key in constant time.
func validKey(r *http.Request, key string) bool {
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), []byte(key)) == 1
}

func (srv *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	srv.metrics.write(w, srv.names())
}

// noteMemory records MLX's active memory for /metrics. MLX is only called
// on its worker, so the models' workers read it after each job and unload
// (/metrics itself never waits for the MLX worker, busy generating).
func (srv *Server) noteMemory() {
	if n, err := mlx.Call(srv.ctx, func() (int64, error) { return mlx.ActiveMemory(), nil }); err == nil {
		srv.metrics.mlxActive.Store(n)
	}
}

// writeJSON answers with one JSON value.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
