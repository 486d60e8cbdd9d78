package plugins

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/plugins/internal/wire"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/plugins/sdk"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/sample"
	"github.com/specula-dev/specula/speculation"
)

// Draft is the host-side proxy of a plugin architecture: what the registry
// constructor returns for it. It holds no model; NewDrafter loads the draft
// in the plugin process (speculation.DrafterFactory).
type Draft struct {
	h    *Host
	lp   *loadedPlugin
	arch *draftv1.Architecture
	caps model.Capabilities
	cfg  registry.Config

	targetDir string
	declared  model.Capabilities
	prepared  bool
}

var (
	_ speculation.DrafterFactory = (*Draft)(nil)
	_ model.TargetUser           = (*Draft)(nil)
)

// Plugin returns the name of the plugin serving the draft.
func (d *Draft) Plugin() string { return d.lp.name }

// Architecture returns the architecture's name.
func (d *Draft) Architecture() string { return d.arch.GetName() }

// Capabilities returns the capability record the plugin's Describe declared.
func (d *Draft) Capabilities() model.Capabilities { return slices.Clone(d.caps) }

// PrepareLoad tells the proxy what the resolved manifest says and Load
// needs: targetDir, the target's checkpoint folder (the host then tells the
// plugin where the target's token embedding and head live, for a draft that
// reads them itself), and the draft capabilities the manifest declared (a
// selector architecture proposes through its selector at the fixed depth
// only when "selector" is declared). The engine calls it (engine.LoadPreparer)
// before NewDrafter; without it no target tensors are sent and the
// architecture's own record decides. targetDir must be an absolute folder.
func (d *Draft) PrepareLoad(targetDir string, declared model.Capabilities) error {
	if !filepath.IsAbs(targetDir) {
		return fmt.Errorf("plugin %s: target checkpoint folder %q is not absolute", d.lp.name, targetDir)
	}
	if st, err := os.Stat(targetDir); err != nil || !st.IsDir() {
		return fmt.Errorf("plugin %s: target checkpoint folder %s is not a folder", d.lp.name, targetDir)
	}
	d.targetDir, d.declared, d.prepared = targetDir, slices.Clone(declared), true
	return nil
}

// AttachTarget asks the plugin whether the draft fits target, without
// loading it (model.TargetUser; manifest resolution calls it, so `specula
// check` and `specula run` refuse a misfit before any weight is read): a
// Load with check_only builds the draft from its config.json, attaches a
// stand-in with target's sizes, and binds the checkpoint's tensor names and
// shapes. Its answer is checked as a real Load's is, and the layer taps it
// asks for are set on target. The process that answered is stopped (a
// plugin predating check_only would have loaded the draft); NewDrafter
// starts a fresh one.
func (d *Draft) AttachTarget(target model.DraftTarget) error {
	req, err := d.loadRequest(target)
	if err != nil {
		return err
	}
	req.Target.Tensors, req.CheckOnly = nil, true
	p, err := d.h.process(d.lp)
	if err != nil {
		return err
	}
	defer d.h.stop(p, killGrace)
	cfg := drafterConfig{name: d.lp.name, timeouts: d.h.cfg.Timeouts, host: d.h, lp: d.lp}
	resp, err := cfg.sendLoad(p, req)
	if st, ok := status.FromError(err); ok && err != nil {
		// The plugin's own words, without gRPC's "rpc error: code = ...",
		// on one line: a long answer (every mismatched tensor) is logged.
		msg := st.Message()
		if first, rest, multi := strings.Cut(msg, "\n"); multi {
			d.h.log.Debug("plugin check failed", "plugin", d.lp.name, "answer", msg)
			msg = fmt.Sprintf("%s (and %d more lines: SPECULA_LOG=debug shows them)", first, strings.Count(rest, "\n")+1)
		}
		err = errors.New(msg)
	}
	if err != nil {
		return fmt.Errorf("plugin %s: checking %s against the target: %w", d.lp.name, req.GetArchitecture(), err)
	}
	check := &Drafter{resp: resp, featureDType: mlx.Float32}
	if err := check.checkLoad(target); err != nil {
		return fmt.Errorf("plugin %s: checking %s against the target: %w", d.lp.name, req.GetArchitecture(), err)
	}
	return nil
}

// NewDrafter loads the draft in a plugin process for target and returns the
// Drafter serving its sessions. It sets the layer taps the plugin asks for on
// target. targetCaches are unused: the plugin keeps its own draft state.
func (d *Draft) NewDrafter(target model.DraftTarget, _ []cache.Cache) (speculation.Drafter, error) {
	req, err := d.loadRequest(target)
	if err != nil {
		return nil, err
	}
	p, err := d.h.process(d.lp)
	if err != nil {
		return nil, err
	}
	sel := d.caps.Contains(model.CapSelector) && (!d.prepared || d.declared.Contains(model.CapSelector))
	dr, err := load(p, req, target, drafterConfig{name: d.lp.name, selector: sel, timeouts: d.h.cfg.Timeouts, log: d.h.log, host: d.h, lp: d.lp})
	if err != nil {
		d.h.stop(p, killGrace)
		return nil, err
	}
	return dr, nil
}

// loadRequest describes the checkpoint and the target for Load.
func (d *Draft) loadRequest(target model.DraftTarget) (*draftv1.LoadRequest, error) {
	info := target.Info()
	req := &draftv1.LoadRequest{
		Architecture:  d.arch.GetName(),
		CheckpointDir: d.cfg.Dir,
		ConfigJson:    d.cfg.JSON,
		Dtype:         d.cfg.DType.String(),
		Device:        "cpu",
		Target:        &draftv1.TargetInfo{HiddenSize: int64(info.HiddenSize), VocabSize: int64(info.VocabSize), NumLayers: int64(target.NumLayers())},
	}
	_ = mlx.Do(context.Background(), func() error {
		if mlx.CurrentDevice() == mlx.GPU {
			req.Device = "gpu"
		}
		return nil
	})
	if d.targetDir != "" {
		locs, err := targetTensors(d.targetDir)
		if err != nil {
			return nil, fmt.Errorf("plugin %s: locating the target's embedding and head in %s: %w", d.lp.name, d.targetDir, err)
		}
		req.Target.Tensors = locs
	}
	return req, nil
}

// targetTensors finds the token embedding and the output head of the
// checkpoint in dir (headers only).
func targetTensors(dir string) ([]*draftv1.TensorLocation, error) {
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	var embed, head *loader.TensorInfo
	for _, t := range ck.Tensors() {
		switch {
		case strings.HasSuffix(t.Name, "embed_tokens.weight") && (embed == nil || len(t.Name) < len(embed.Name)):
			embed = &t
		case t.Name == "lm_head.weight" || (strings.HasSuffix(t.Name, ".lm_head.weight") && head == nil):
			head = &t
		}
	}
	// A quantized table or head (an MLX-format target) comes with its
	// scales and biases, under the role plus their suffix; the plugin
	// infers the quantization from the shapes and the hidden size.
	locate := func(t *loader.TensorInfo, role string) []*draftv1.TensorLocation {
		if t == nil {
			return nil
		}
		list := []*loader.TensorInfo{t}
		roles := []string{role}
		base := strings.TrimSuffix(t.Name, ".weight")
		for _, suffix := range []string{sdk.ScalesSuffix, sdk.BiasesSuffix} {
			if q, ok := ck.Tensor(base + suffix); ok {
				list, roles = append(list, &q), append(roles, role+suffix)
			}
		}
		var locs []*draftv1.TensorLocation
		for i, x := range list {
			loc := &draftv1.TensorLocation{Name: x.Name, Role: roles[i], File: x.Path, Offset: x.Offset, Length: x.Size, Dtype: x.DType.String()}
			for _, s := range x.Shape {
				loc.Shape = append(loc.Shape, int64(s))
			}
			locs = append(locs, loc)
		}
		return locs
	}
	out := append(locate(embed, sdk.RoleEmbedding), locate(head, sdk.RoleHead)...)
	return out, nil
}

// drafterConfig is what a Drafter needs besides the connection.
type drafterConfig struct {
	name     string
	selector bool
	timeouts Timeouts
	log      *slog.Logger
	host     *Host         // nil for an in-process connection: no restarts
	lp       *loadedPlugin // with host
}

// Drafter serves draft sessions of a draft loaded in a plugin process
// (speculation.Drafter). It restarts a crashed or hung process at the next
// Open, within the restart budget.
type Drafter struct {
	cfg          drafterConfig
	req          *draftv1.LoadRequest
	resp         *draftv1.LoadResponse
	vocab        int
	featureDType mlx.DType

	mu       sync.Mutex
	proc     *process // nil once retired, until restarted
	restarts []time.Time
	disabled bool // restart budget spent, or closed
	closed   bool
	requests uint64
}

var _ speculation.Drafter = (*Drafter)(nil)

// load sends Load over p and checks the answer against target, setting the
// layer taps the plugin asks for.
func load(p *process, req *draftv1.LoadRequest, target model.DraftTarget, cfg drafterConfig) (*Drafter, error) {
	if cfg.timeouts.Load <= 0 {
		cfg.timeouts = DefaultTimeouts()
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	resp, err := cfg.sendLoad(p, req)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: Load %s: %w", cfg.name, req.GetArchitecture(), err)
	}
	d := &Drafter{cfg: cfg, req: req, resp: resp, vocab: int(req.GetTarget().GetVocabSize()), proc: p, featureDType: mlx.Float32}
	if err := d.checkLoad(target); err != nil {
		return nil, fmt.Errorf("plugin %s: Load %s: %w", cfg.name, req.GetArchitecture(), err)
	}
	cfg.log.Info("plugin draft loaded", "plugin", cfg.name, "architecture", req.GetArchitecture(), "max_depth", resp.GetMaxDepth(),
		"needs_features", resp.GetNeedsFeatures(), "layer_taps", resp.GetLayerTaps(), "selector", cfg.selector)
	return d, nil
}

// sendLoad sends Load within its deadline; closing the host cancels it.
func (cfg *drafterConfig) sendLoad(p *process, req *draftv1.LoadRequest) (*draftv1.LoadResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeouts.Load)
	if cfg.host != nil {
		ctx, cancel = cfg.host.callContext(context.Background(), cfg.timeouts.Load)
	}
	defer cancel()
	return p.rpc.Load(ctx, req)
}

// checkLoad validates Load's answer and applies the layer taps.
func (d *Drafter) checkLoad(target model.DraftTarget) error {
	r := d.resp
	if r.GetMaxDepth() < 1 {
		return fmt.Errorf("max_depth %d, want at least 1", r.GetMaxDepth())
	}
	if !r.GetNeedsFeatures() {
		return nil
	}
	var err error
	if d.featureDType, err = wire.ParseDType(r.GetFeatureDtype()); err != nil || !d.featureDType.IsFloat() {
		return fmt.Errorf("feature_dtype %q is not a float safetensors dtype (BF16, F16, F32)", r.GetFeatureDtype())
	}
	h := target.Info().HiddenSize
	taps := r.GetLayerTaps()
	want := h
	if len(taps) > 0 {
		ids := make([]int, len(taps))
		for i, t := range taps {
			ids[i] = int(t)
			if int(t) >= target.NumLayers() || (i > 0 && t <= taps[i-1]) {
				return fmt.Errorf("layer_taps %v: want ascending ids below the target's %d layers", taps, target.NumLayers())
			}
		}
		err := mlx.Do(context.Background(), func() error { return target.SetLayerTaps(ids) })
		if err != nil {
			return fmt.Errorf("setting layer taps %v on the target: %w", taps, err)
		}
		want = len(taps) * h
	}
	if int(r.GetFeatureWidth()) != want {
		return fmt.Errorf("feature_width %d, want %d (%d taps × hidden size %d)", r.GetFeatureWidth(), want, max(1, len(taps)), h)
	}
	return nil
}

// Limit is the plugin's max_depth.
func (d *Drafter) Limit() int { return int(d.resp.GetMaxDepth()) }

// Selector reports whether sessions run at the fixed selector depth.
func (d *Drafter) Selector() bool { return d.cfg.selector }

// LoadResponse returns what the plugin answered to Load.
func (d *Drafter) LoadResponse() *draftv1.LoadResponse {
	return proto.Clone(d.resp).(*draftv1.LoadResponse)
}

// PID returns the plugin process's id, or 0 when none is running.
func (d *Drafter) PID() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proc == nil {
		return 0
	}
	return d.proc.pid
}

// Restarts returns how many times the plugin process was restarted within
// the current budget window.
func (d *Drafter) Restarts() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.restarts)
}

// Close ends the plugin process serving the draft and waits for it to exit
// (io.Closer; the engine's Close calls it). Sessions opened afterwards
// decline every proposal, with stats reason FaultClosed; a session in
// flight ends the same way, quietly. Close is idempotent and returns nil.
func (d *Drafter) Close() error {
	d.mu.Lock()
	p := d.proc
	d.proc = nil
	d.disabled, d.closed = true, true
	d.mu.Unlock()
	if p != nil {
		d.stopProcess(p)
	}
	return nil
}

// isClosed reports whether Close was called, on the drafter or on its host.
func (d *Drafter) isClosed() bool {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	return closed || (d.cfg.host != nil && d.cfg.host.isClosed())
}

func (d *Drafter) stopProcess(p *process) {
	if d.cfg.host != nil {
		d.cfg.host.stop(p, killGrace)
	} else {
		p.kill(killGrace)
	}
}

// retire takes a crashed or hung process out of service and kills it in the
// background; the next Open restarts it.
func (d *Drafter) retire(p *process) {
	d.mu.Lock()
	if d.proc == p {
		d.proc = nil
	}
	d.mu.Unlock()
	go d.stopProcess(p)
}

// current returns a live process, restarting one within the budget.
func (d *Drafter) current() (*process, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proc != nil && !d.proc.exited() {
		return d.proc, nil
	}
	if d.proc != nil {
		go d.stopProcess(d.proc)
		d.proc = nil
	}
	if d.disabled {
		return nil, errors.New("disabled")
	}
	if d.cfg.host == nil {
		d.disabled = true
		return nil, errors.New("the connection is gone and cannot be restarted")
	}
	now := time.Now()
	d.restarts = slices.DeleteFunc(d.restarts, func(t time.Time) bool { return now.Sub(t) > RestartWindow })
	if len(d.restarts) >= RestartBudget {
		d.disabled = true
		d.cfg.log.Error("plugin draft disabled: restart budget spent; reload the manifest to try again",
			"plugin", d.cfg.name, "restarts", len(d.restarts), "window", RestartWindow)
		return nil, fmt.Errorf("%d restarts within %v", len(d.restarts), RestartWindow)
	}
	d.restarts = append(d.restarts, now)
	p, err := d.cfg.host.restart(d.cfg.lp)
	if err != nil {
		return nil, err
	}
	resp, err := d.cfg.sendLoad(p, d.req)
	if err == nil && !sameLoad(resp, d.resp) {
		err = fmt.Errorf("Load answered differently after the restart (%v, was %v)", resp, d.resp)
	}
	if err != nil {
		d.cfg.host.stop(p, killGrace)
		return nil, err
	}
	d.cfg.log.Warn("plugin restarted", "plugin", d.cfg.name, "pid", p.pid, "restarts", len(d.restarts))
	d.proc = p
	return p, nil
}

// sameLoad compares the fields a running drafter relies on.
func sameLoad(a, b *draftv1.LoadResponse) bool {
	return a.GetMaxDepth() == b.GetMaxDepth() && a.GetNeedsFeatures() == b.GetNeedsFeatures() &&
		a.GetFeatureWidth() == b.GetFeatureWidth() && a.GetFeatureDtype() == b.GetFeatureDtype() &&
		slices.Equal(a.GetLayerTaps(), b.GetLayerTaps())
}

// Open starts a session for a request sampled by s. If the plugin is down
// and cannot be restarted, or Open fails, the session is faulted from the
// start: it declines every proposal and the request decodes plainly.
func (d *Drafter) Open(s *sample.Sampler) speculation.DraftSession {
	sess := &session{d: d, sampler: s, seed: sessionSeed(s)}
	if d.isClosed() {
		sess.fault = FaultClosed
		return sess
	}
	p, err := d.current()
	if err != nil {
		sess.faultf(nil, "Open", FaultCrash, "plugin %s is not running: %v", d.cfg.name, err)
		return sess
	}
	sess.proc = p
	d.mu.Lock()
	d.requests++
	reqID := fmt.Sprintf("%s-%d", d.cfg.name, d.requests)
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.timeouts.Open)
	defer cancel()
	resp, err := p.rpc.Open(ctx, &draftv1.OpenRequest{RequestId: reqID})
	if err != nil {
		sess.callFailed("Open", err)
		return sess
	}
	sess.id = resp.GetSessionId()
	return sess
}

// sessionSeed is the seed sent with proposals: the request's seed, or a
// random one per session.
func sessionSeed(s *sample.Sampler) uint64 {
	if o := s.Options(); o.UseSeed {
		return o.Seed
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// ConnectOptions configure Connect.
type ConnectOptions struct {
	// Name names the plugin in logs and messages.
	Name string
	// Architecture is the architecture to load.
	Architecture string
	// Checkpoint is the draft's checkpoint (folder, config.json, dtype).
	Checkpoint registry.Config
	// Target is the host's target; Load's layer taps are set on it.
	Target model.DraftTarget
	// Selector runs sessions at the fixed selector depth.
	Selector bool
	// Timeouts overrides DefaultTimeouts field by field.
	Timeouts Timeouts
	// Logger receives the drafter's records (nil: slog.Default()).
	Logger *slog.Logger
}

// Connect loads a draft through conn, an established connection to a draft
// server — the in-process one that tests and the conformance kit make — and
// returns its Drafter. No process is involved, so a fault cannot be
// repaired by a restart: the drafter is disabled after one.
func Connect(conn draftv1.DraftClient, opts ConnectOptions) (*Drafter, error) {
	h := NewHost(Config{Timeouts: opts.Timeouts, Logger: opts.Logger})
	name := opts.Name
	if name == "" {
		name = "in-process"
	}
	d := &Draft{h: h, lp: &loadedPlugin{name: name}, arch: &draftv1.Architecture{Name: opts.Architecture}, cfg: opts.Checkpoint}
	req, err := d.loadRequest(opts.Target)
	if err != nil {
		return nil, err
	}
	p := &process{name: name, rpc: conn}
	return load(p, req, opts.Target, drafterConfig{name: name, selector: opts.Selector, timeouts: h.cfg.Timeouts, log: h.log})
}
