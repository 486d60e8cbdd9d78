package plugins

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/registry"
)

// Timeouts are the deadlines of the protocol's calls (spec/plugins.md
// section 6). A call past its deadline is a hang: the process is killed and
// restarted at the next request.
type Timeouts struct {
	Describe, Load, Open, Settle, Propose, Close time.Duration
	// Committed is the base deadline of a Committed call, plus
	// CommittedPer1024 for every (started) 1024 rows it carries.
	Committed, CommittedPer1024 time.Duration
}

// DefaultTimeouts returns the spec's defaults: Describe 10 s, Load 10 min,
// Open, Settle, Propose and Close 5 s, Committed 5 s + 1 s per 1024 rows.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		Describe: 10 * time.Second, Load: 10 * time.Minute,
		Open: 5 * time.Second, Settle: 5 * time.Second, Propose: 5 * time.Second, Close: 5 * time.Second,
		Committed: 5 * time.Second, CommittedPer1024: time.Second,
	}
}

// Restart budget of a loaded draft: at most RestartBudget restarts within
// RestartWindow; beyond that it is disabled until reloaded.
const (
	RestartBudget = 3
	RestartWindow = 5 * time.Minute
)

// Config configures a Host. The zero value searches the default path with
// the default timeouts.
type Config struct {
	// Dirs are searched before the default path (see SearchPath).
	Dirs []string
	// Logger receives the host's records and the plugins' (under
	// logger=plugin.<name>); nil means slog.Default().
	Logger *slog.Logger
	// Timeouts overrides DefaultTimeouts field by field (zero fields keep
	// the default).
	Timeouts Timeouts
	// StartTimeout bounds a plugin's start-up until its handshake (default
	// 60 s: a plugin may load GPU libraries first).
	StartTimeout time.Duration
	// Env adds KEY=VALUE entries to every plugin's environment.
	Env []string
	// HostVersion is sent with Describe.
	HostVersion string
}

// Host launches plugins and keeps track of them. Its methods are safe for
// concurrent use. Close ends every plugin it started.
type Host struct {
	cfg Config
	log *slog.Logger

	// done is cancelled by Close: it ends starts and calls in flight.
	done      context.Context
	closeDone context.CancelFunc

	mu      sync.Mutex
	loaded  map[string]*loadedPlugin // by plugin name
	running map[*process]bool
	closed  bool
}

// loadedPlugin is a plugin whose binary was found, started and described.
type loadedPlugin struct {
	name, sha string
	cand      *Candidate
	desc      *draftv1.DescribeResponse
	idle      *process // started for Describe and not yet given a draft
}

// NewHost returns a host for cfg.
func NewHost(cfg Config) *Host {
	d := DefaultTimeouts()
	t := &cfg.Timeouts
	for _, f := range []struct {
		dst *time.Duration
		def time.Duration
	}{
		{&t.Describe, d.Describe}, {&t.Load, d.Load}, {&t.Open, d.Open}, {&t.Settle, d.Settle},
		{&t.Propose, d.Propose}, {&t.Close, d.Close}, {&t.Committed, d.Committed}, {&t.CommittedPer1024, d.CommittedPer1024},
	} {
		if *f.dst <= 0 {
			*f.dst = f.def
		}
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = time.Minute
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	h := &Host{cfg: cfg, log: log, loaded: map[string]*loadedPlugin{}, running: map[*process]bool{}}
	h.done, h.closeDone = context.WithCancel(context.Background())
	return h
}

// callContext bounds a call to a plugin: ctx with timeout, also cancelled
// when the host closes.
func (h *Host) callContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	stop := context.AfterFunc(h.done, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// SearchPath returns the folders this host searches.
func (h *Host) SearchPath() []string { return SearchPath(h.cfg.Dirs...) }

func (h *Host) track(p *process) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running[p] = true
}

// stop ends p (a graceful shutdown first, SIGKILL after grace; see
// process.kill) and forgets it.
func (h *Host) stop(p *process, grace time.Duration) {
	p.kill(grace)
	h.mu.Lock()
	delete(h.running, p)
	h.mu.Unlock()
}

// PIDs returns the process ids of the plugins the host has running (a
// process being stopped may still be listed).
func (h *Host) PIDs() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for p := range h.running {
		if p.pid > 0 {
			out = append(out, p.pid)
		}
	}
	slices.Sort(out)
	return out
}

// isClosed reports whether Close was called.
func (h *Host) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// Close ends every plugin process the host started and waits for them: each
// gets a short grace to shut down, then is killed, so Close returns within
// seconds whatever the plugins do. Starts and calls in flight are cancelled.
// Requests still running through its drafters continue by plain decoding,
// with stats reason FaultClosed (not a fault: nothing is logged).
func (h *Host) Close() {
	h.mu.Lock()
	h.closed = true
	h.closeDone()
	procs := make([]*process, 0, len(h.running))
	for p := range h.running {
		procs = append(procs, p)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { h.stop(p, killGrace) })
	}
	wg.Wait()
}

// CleanupClients ends every plugin process started by any host of this
// program (go-plugin's managed clients). Programs defer it in main, so that
// no plugin outlives them even on an error path.
func CleanupClients() { plugin.CleanupClients() }

// LoadPlugin makes plugin name available in reg (registry.Default when nil):
// it finds the binary whose SHA-256 is sha256 on the search path, starts it
// (go-plugin checks the digest again right before exec), checks its
// Describe against the file name, and adds the architectures it serves with
// registry.AddPlugin. A plugin already loaded with the same digest is not
// started again. Its signature is manifests.Options.LoadPlugin's.
func (h *Host) LoadPlugin(ctx context.Context, name, sha256 string, reg *registry.Registry) error {
	if reg == nil {
		reg = registry.Default
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return errors.New("plugin host is closed")
	}
	lp := h.loaded[name]
	h.mu.Unlock()
	if lp != nil && lp.sha != sha256 {
		return fmt.Errorf("plugin %s is already loaded from %s (sha256 %s); one program runs one build of a plugin", name, lp.cand.Path, lp.sha)
	}
	if lp == nil {
		c, err := Find(h.SearchPath(), name, sha256)
		if err != nil {
			return err
		}
		p, err := h.launch(ctx, c, sha256)
		if err != nil {
			return err
		}
		desc, err := h.describe(ctx, p, c)
		if err != nil {
			h.stop(p, killGrace)
			return err
		}
		lp = &loadedPlugin{name: name, sha: sha256, cand: c, desc: desc, idle: p}
		h.mu.Lock()
		h.loaded[name] = lp
		h.mu.Unlock()
		h.log.Info("plugin loaded", "plugin", name, "version", desc.GetPluginVersion(), "path", c.Path, "sha256", sha256, "architectures", len(desc.GetArchitectures()))
	}
	return h.register(lp, reg)
}

// register adds lp's architectures to reg unless they are there already.
// They enter under plugin-qualified names (registry.QualifiedName), so a
// plugin may serve an architecture a built-in also has: manifests naming the
// plugin find its entry with registry.LookupPlugin.
func (h *Host) register(lp *loadedPlugin, reg *registry.Registry) error {
	var archs []registry.PluginArch
	for _, a := range lp.desc.GetArchitectures() {
		if _, err := reg.LookupPlugin(lp.name, a.GetName()); err == nil {
			continue
		}
		caps := make(model.Capabilities, 0, len(a.GetCapabilities()))
		for _, s := range a.GetCapabilities() {
			c, err := model.ParseCapability(s)
			if err != nil {
				return fmt.Errorf("plugin %s: architecture %s: %v", lp.name, a.GetName(), err)
			}
			caps = append(caps, c)
		}
		arch := a
		archs = append(archs, registry.PluginArch{
			Name: a.GetName(), Kind: registry.KindDraft, Capabilities: caps,
			New: func(cfg registry.Config) (any, error) { return h.newDraft(lp, arch, caps, cfg) },
		})
	}
	if len(archs) == 0 {
		return nil
	}
	if err := reg.AddPlugin(lp.name, archs); err != nil {
		return fmt.Errorf("plugin %s: %w", lp.name, err)
	}
	return nil
}

// newDraft is the registry constructor of a plugin architecture.
func (h *Host) newDraft(lp *loadedPlugin, a *draftv1.Architecture, caps model.Capabilities, cfg registry.Config) (*Draft, error) {
	if !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("checkpoint folder %q is not absolute", cfg.Dir)
	}
	if st, err := os.Stat(cfg.Dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("checkpoint folder %s is not a folder", cfg.Dir)
	}
	return &Draft{h: h, lp: lp, arch: a, caps: caps, cfg: cfg}, nil
}

// process returns a process for a new loaded draft: the one started for
// Describe if still unused, else a fresh one (one process serves one loaded
// draft).
func (h *Host) process(lp *loadedPlugin) (*process, error) {
	h.mu.Lock()
	p := lp.idle
	lp.idle = nil
	closed := h.closed
	h.mu.Unlock()
	if closed {
		return nil, errors.New("plugin host is closed")
	}
	if p != nil && !p.exited() {
		return p, nil
	}
	return h.restart(lp)
}

// restart starts lp's binary again and checks its Describe.
func (h *Host) restart(lp *loadedPlugin) (*process, error) {
	p, err := h.launch(h.done, lp.cand, lp.sha)
	if err != nil {
		return nil, err
	}
	if _, err := h.describe(h.done, p, lp.cand); err != nil {
		h.stop(p, killGrace)
		return nil, err
	}
	return p, nil
}
