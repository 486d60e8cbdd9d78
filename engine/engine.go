// Package engine ties a resolved manifest's target, draft, caches, sampler and
// tokenizer into Generate: load a manifest once, then serve requests one at a
// time on the MLX worker, streaming tokens.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/distributed"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/manifests"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/speculation"
	"github.com/specula-dev/specula/tokenizer"
)

// Progress reports loading: phase names the step ("target weights", ...);
// done and total count bytes (total 0 when unknown).
type Progress func(phase string, done, total int64)

// Options configure Load.
type Options struct {
	// Registry resolves architectures (nil: registry.Default).
	Registry *registry.Registry
	// LoadPlugin launches plugin drafts (nil refuses manifests that name
	// one); see manifests.Options.
	LoadPlugin func(ctx context.Context, name, sha256 string, reg *registry.Registry) error
	// Progress, if set, is called as weights are read.
	Progress Progress
	// Logger receives structured logs (nil: slog.Default()).
	Logger *slog.Logger
	// NoDraft loads the target alone: the manifest's draft is not resolved,
	// started or loaded (every request decodes plainly).
	NoDraft bool
	// PromptCacheBytes > 0 keeps the caches between requests (a prompt
	// cache: see Generate), with checkpoints of at most this many bytes;
	// 0 gives every request fresh caches, freed when it ends. Engines with
	// a plugin draft never keep caches (the draft's live in its process).
	PromptCacheBytes int64
	// RequireTokenizer refuses, with ErrNoTokenizer and before any weight
	// is read, a target folder without tokenizer.json: the caller has a
	// text prompt to encode.
	RequireTokenizer bool
}

// DraftError is a Load failure that comes from the manifest's draft alone:
// the target resolves and its weights are present, so loading with
// Options.NoDraft would succeed. Err is the failure.
type DraftError struct{ Err error }

func (e *DraftError) Error() string { return e.Err.Error() }

// Unwrap returns the failure.
func (e *DraftError) Unwrap() error { return e.Err }

// Engine is a loaded manifest: a target with weights, an optional draft,
// the tokenizer when the target folder has one, and the depth controller
// that persists across requests.
type Engine struct {
	plan   *manifests.Plan
	target model.Model
	tok    *tokenizer.Dir

	draft      model.BlockDraft    // built-in block draft, or nil
	selector   bool                // the manifest declared "selector"
	drafter    speculation.Drafter // a plugin drafter, or nil
	controller *speculation.Controller

	eos    []int32
	totals speculation.Stats
	group  *mlx.Group // the ranks the target is sharded over; nil in a process of its own
	log    *slog.Logger
	pcache *promptCache // nil: fresh caches per request

	closeOnce sync.Once
	closeErr  error

	// LoadTime is how long Load took.
	LoadTime time.Duration
}

// Load resolves the manifest at path, checks that its weights are present
// and loads them. It runs its MLX work on the worker.
func Load(ctx context.Context, path string, opts Options) (*Engine, error) {
	start := time.Now()
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	m, err := manifests.Load(path)
	if err != nil {
		return nil, err
	}
	// The device the worker computes on, not whether the build has a GPU:
	// with SPECULA_DEVICE=cpu a CUDA build runs on the CPU, where dtype
	// "auto" must mean float32.
	gpu, err := mlx.Call(ctx, func() (bool, error) { return mlx.CurrentDevice() == mlx.GPU, nil })
	if err != nil {
		return nil, err
	}
	resolveOpts := manifests.Options{GPU: gpu, LoadPlugin: opts.LoadPlugin, TargetOnly: opts.NoDraft}
	plan, err := manifests.Resolve(ctx, m, opts.Registry, resolveOpts)
	if err == nil {
		err = plan.Ready()
	}
	if err != nil {
		return nil, blameDraft(ctx, m, opts.Registry, resolveOpts, err)
	}
	for _, w := range plan.Warnings {
		log.Warn(w, "manifest", path)
	}
	e := &Engine{plan: plan, target: plan.Target.Model(), log: log}
	if plan.Target.Tokenizer != "" {
		if e.tok, err = tokenizer.LoadDir(plan.Target.Dir); err != nil {
			return nil, err
		}
		e.eos = append(e.eos, e.tok.EOS...)
	} else if opts.RequireTokenizer {
		return nil, fmt.Errorf("%s: %w", plan.Target.Dir, ErrNoTokenizer)
	} else {
		// Token ids need no tokenizer, but the model's EOS ids still end
		// generation, as in transformers' generate.
		if e.eos, err = tokenizer.GenerationEOS(plan.Target.Dir); err != nil {
			return nil, err
		}
	}
	if _, ok := distributed.Joined(); ok {
		if err := e.shardTarget(ctx, plan); err != nil {
			return nil, err
		}
	}
	err = mlx.Do(ctx, func() error {
		if err := loadWeights(e.target, "target weights", plan.Target.Dir, opts.Progress); err != nil {
			return fmt.Errorf("loading target %s from %s: %w", plan.Target.Architecture, plan.Target.Dir, err)
		}
		if err := e.loadDraft(plan, opts.Progress); err != nil {
			if ctx.Err() != nil {
				return err
			}
			return &DraftError{Err: err}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if opts.PromptCacheBytes > 0 && e.drafter == nil {
		e.pcache = &promptCache{budget: opts.PromptCacheBytes}
	}
	e.LoadTime = time.Since(start)
	return e, nil
}

// shardTarget joins the distributed group this process was started in as a
// rank (by `specula launch`) and cuts the target over it, so that loading
// reads this rank's part of its weights (tensor parallelism,
// spec/distributed.md). The draft is replicated: every rank drafts alike and
// so reaches the same acceptance.
func (e *Engine) shardTarget(ctx context.Context, plan *manifests.Plan) error {
	arch := plan.Target.Architecture
	tp, ok := e.target.(model.TensorParallel)
	if !ok {
		return fmt.Errorf("target %s cannot be sharded over ranks (tensor parallelism): this architecture does not implement it; run it as one process, without `specula launch`", arch)
	}
	if plan.Draft != nil && plan.Draft.Plugin != "" {
		return fmt.Errorf("draft %s is served by plugin %s, which does not run under `specula launch`: a plugin failing on one rank would leave the ranks computing different forwards; use a built-in draft, or run without the draft (--no-draft)", plan.Draft.Architecture, plan.Draft.Plugin)
	}
	g, err := mlx.Call(ctx, distributed.Join)
	if err != nil {
		return err
	}
	if err := tp.Shard(g); err != nil {
		return fmt.Errorf("rank %d of %d: sharding target %s: %w", g.Rank(), g.Size(), arch, err)
	}
	e.group = g
	e.log.Info("tensor parallel target", "rank", g.Rank(), "ranks", g.Size(), "backend", g.Backend())
	return nil
}

// blameDraft returns err, a failure to resolve m, as a *DraftError when the
// target alone resolves with its weights present: then the draft is what
// failed. (Resolving the target again reads headers only.)
func blameDraft(ctx context.Context, m *manifests.Manifest, reg *registry.Registry, opts manifests.Options, err error) error {
	if m.Draft == nil || opts.TargetOnly || ctx.Err() != nil {
		return err
	}
	opts.TargetOnly, opts.LoadPlugin = true, nil
	plan, terr := manifests.Resolve(ctx, m, reg, opts)
	if terr != nil || plan.Ready() != nil {
		return err
	}
	return &DraftError{Err: err}
}

// loadDraft loads the draft's weights (built-in) or builds the plugin's
// drafter, and sets up the depth controller.
func (e *Engine) loadDraft(plan *manifests.Plan, progress Progress) error {
	if plan.Draft == nil || plan.Speculation.Mode == manifests.ModeOff {
		e.controller = speculation.NewController(0, 0)
		return nil
	}
	limit := 0
	if f, ok := plan.Draft.Instance().(speculation.DrafterFactory); ok {
		name := plan.Draft.Architecture
		if plan.Draft.Plugin != "" {
			name = fmt.Sprintf("%s (plugin %s)", name, plan.Draft.Plugin)
		}
		dt, ok := plan.Target.DraftTarget()
		if !ok {
			return fmt.Errorf("draft %s needs a target declaring the draft-target capability", name)
		}
		if p, ok := f.(LoadPreparer); ok {
			if err := p.PrepareLoad(plan.Target.Dir, plan.Draft.Capabilities); err != nil {
				return fmt.Errorf("preparing draft %s: %w", name, err)
			}
		}
		d, err := f.NewDrafter(dt, nil)
		if err != nil {
			return fmt.Errorf("starting draft %s: %w", name, err)
		}
		e.drafter = d
		limit = d.Limit()
	} else {
		bd, ok := plan.Draft.BlockDraft()
		if !ok {
			return fmt.Errorf("draft %s: the speculation core drives block drafts; declare \"block-draft\" in [draft] capabilities", plan.Draft.Architecture)
		}
		dir := plan.Draft.Dir
		if plan.Draft.Weights.Status == manifests.WeightsNone {
			dir = "" // weights = false: LoadWeights gets no tensors
		}
		if err := loadWeights(bd, "draft weights", dir, progress); err != nil {
			return fmt.Errorf("loading draft %s from %s: %w", plan.Draft.Architecture, plan.Draft.Dir, err)
		}
		_, e.selector = plan.Draft.Selector()
		e.selector = e.selector && plan.Speculation.Mode == manifests.ModeSelector
		e.draft = bd
		size, _ := bd.BlockParams()
		limit = size - 1
	}
	e.controller = speculation.NewController(limit, plan.Speculation.MaxDepth)
	return nil
}

// LoadPreparer is implemented by draft instances that need the resolved
// manifest's facts before NewDrafter (speculation.DrafterFactory): the plugin
// host's proxy (plugins.Draft), which tells the plugin where the target's
// token embedding and head live (targetDir, the target checkpoint folder)
// and whether to propose through a selector (declared, the draft
// capabilities the manifest declares). The engine calls PrepareLoad right
// before NewDrafter.
type LoadPreparer interface {
	PrepareLoad(targetDir string, declared model.Capabilities) error
}

// Close releases what the engine holds outside this process: the process
// serving a plugin draft ends (the drafter is closed, through io.Closer).
// Programs call it when done with the engine; they also close their plugin
// host on every exit path (package plugins), which ends any plugin process
// an engine did not get to own. Close is idempotent: later calls return the
// first call's result. The engine stays usable: with a plugin draft, requests
// after Close (and one running during it) decode plainly, with stats reason
// "plugin-closed"; a built-in draft is unaffected.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		if c, ok := e.drafter.(io.Closer); ok {
			e.closeErr = c.Close()
		}
	})
	return e.closeErr
}

// weightLoader is what loadWeights needs of a target or draft.
type weightLoader interface {
	LoadWeights(map[string]*mlx.Array) error
}

// loadWeights maps a checkpoint's tensors lazily through MLX's own loader
// (validated by package loader first: MLX reads into its own allocations,
// on CUDA straight to device memory), binds them, and reads what the model
// keeps in groups so progress can be reported. dir "" binds no tensors (a
// draft declared weights = false).
func loadWeights(m weightLoader, phase, dir string, progress Progress) error {
	tensors := map[string]*mlx.Array{}
	if dir != "" {
		ck, err := loader.OpenCheckpoint(dir)
		if err != nil {
			return err
		}
		defer ck.Close()
		if tensors, err = ck.Arrays(); err != nil {
			return err
		}
	}
	if err := m.LoadWeights(tensors); err != nil {
		return err
	}
	if h, ok := m.(model.WeightHolder); ok {
		if err := evalWithProgress(h.Weights(), phase, progress); err != nil {
			return err
		}
	}
	mlx.Sweep()
	return nil
}

// evalWithProgress evaluates arrays in groups of about 256 MiB.
func evalWithProgress(arrays []*mlx.Array, phase string, progress Progress) error {
	const group = 256 << 20
	var total int64
	for _, a := range arrays {
		total += a.NBytes()
	}
	var done, pending int64
	var batch []*mlx.Array
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := mlx.Eval(batch...); err != nil {
			return err
		}
		// The checkpoint's tensors that this group read can go now: a
		// model keeping a derived array (a cast, a folded norm) holds a
		// copy; a rank of a sharded target read only its parts of the
		// tensors it cuts. Arrays still to be read stay reachable
		// through the pinned weights' graphs.
		mlx.Sweep()
		done += pending
		pending, batch = 0, batch[:0]
		if progress != nil {
			progress(phase, done, total)
		}
		return nil
	}
	if progress != nil {
		progress(phase, 0, total)
	}
	for _, a := range arrays {
		batch = append(batch, a)
		pending += a.NBytes()
		if pending >= group {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// Plan returns the resolved manifest.
func (e *Engine) Plan() *manifests.Plan { return e.plan }

// Tokenizer returns the target folder's tokenizer, or nil when it has none.
func (e *Engine) Tokenizer() *tokenizer.Dir { return e.tok }

// Target returns the loaded target.
func (e *Engine) Target() model.Model { return e.target }

// Controller returns the depth controller shared by the engine's requests.
func (e *Engine) Controller() *speculation.Controller { return e.controller }

// Totals returns the speculation counters summed over every request so far.
func (e *Engine) Totals() speculation.Stats { return e.totals }

// HasDraft reports whether requests can draft.
func (e *Engine) HasDraft() bool { return e.draft != nil || e.drafter != nil }

// newCore builds the per-request speculation core over the request's caches.
func (e *Engine) newCore(eos []int32, req Request, targetCaches, draftCaches []cache.Cache) *speculation.Core {
	cfg := speculation.Config{
		Target:          e.target,
		TargetCaches:    targetCaches,
		MaxDepth:        e.plan.Speculation.MaxDepth,
		SelectorDepth:   e.plan.Speculation.FixedDepth,
		ConfidenceFloor: e.confidenceFloor(),
		EOS:             eos,
		FixedDepth:      req.FixedDepth,
		Controller:      e.controller,
		Logger:          e.log,
		NoPipeline:      req.NoPipeline || pipelineOff,
		NoChain:         chainOff,
	}
	switch {
	case req.Drafter != nil:
		cfg.Drafter = req.Drafter
		// The request's drafter must not train the loaded pair's controller.
		cfg.Controller = nil
	case e.draft != nil:
		cfg.Drafter = speculation.NewBlockDrafter(e.draft, targetCaches, draftCaches, e.selector)
	case e.drafter != nil:
		cfg.Drafter = e.drafter
	}
	return speculation.NewCore(cfg)
}

// requestCaches are one request's caches: the prompt cache's, or fresh ones
// freed when the request ends.
type requestCaches struct {
	target, draft []cache.Cache
	// resumed is the number of prompt tokens the caches hold already.
	resumed int
	pc      *promptCache // nil for fresh caches
}

// acquireCaches returns the caches for a request with this prompt: from the
// prompt cache, unless there is none or the request brings its own drafter
// (whose state the cache knows nothing of).
func (e *Engine) acquireCaches(prompt []int32, req Request) *requestCaches {
	fresh := func() (target, draft []cache.Cache) {
		target = e.target.NewCaches()
		if e.draft != nil && req.Drafter == nil {
			draft = e.draft.NewCaches()
		}
		return target, draft
	}
	if e.pcache == nil || req.Drafter != nil {
		t, d := fresh()
		return &requestCaches{target: t, draft: d}
	}
	t, d, resumed := e.pcache.acquire(prompt, fresh)
	return &requestCaches{target: t, draft: d, resumed: resumed, pc: e.pcache}
}

// schedule asks for prompt-cache checkpoints at offsets (see
// promptCache.schedule); take must follow once the prompt is written.
func (rc *requestCaches) schedule(offsets []int) []int {
	if rc.pc == nil {
		return nil
	}
	return rc.pc.schedule(offsets)
}

// take keeps the checkpoints the prompt's writing reached.
func (rc *requestCaches) take(scheduled []int) {
	if rc.pc == nil {
		return
	}
	for _, c := range rc.target {
		if c != nil {
			rc.pc.take(scheduled, c.Offset())
			return
		}
	}
}

// release ends the request: fresh caches are freed; the prompt cache keeps
// its caches, holding a prefix of seq, when healthy.
func (rc *requestCaches) release(seq []int32, healthy bool) {
	if rc.pc != nil {
		rc.pc.release(seq, healthy)
		return
	}
	for _, c := range slices.Concat(rc.target, rc.draft) {
		if c != nil {
			c.Free()
		}
	}
}

// PromptCacheStats reports what the prompt cache holds: tokens in its live
// caches, checkpoints and their bytes (all 0 without one). Safe only
// between requests' MLX work; it runs on the MLX worker.
func (e *Engine) PromptCacheStats(ctx context.Context) (tokens, checkpoints int, bytes int64, err error) {
	if e.pcache == nil {
		return 0, 0, 0, nil
	}
	err = mlx.Do(ctx, func() error {
		tokens, checkpoints, bytes = e.pcache.stats()
		return nil
	})
	return tokens, checkpoints, bytes, err
}

// Free releases what the engine holds on the MLX worker: the prompt cache
// and the target's and draft's weights; it also closes a plugin draft (as
// Close). The engine must not be used afterwards.
func (e *Engine) Free(ctx context.Context) error {
	closeErr := e.Close()
	err := mlx.Do(ctx, func() error {
		if e.pcache != nil {
			e.pcache.reset()
		}
		for _, m := range []any{e.target, e.draft} {
			if f, ok := m.(interface{ Free() }); ok {
				f.Free()
			}
		}
		mlx.Sweep()
		mlx.ClearCache()
		return nil
	})
	return errors.Join(err, closeErr)
}

// confidenceFloor is the manifest's confidence_floor, else the default of
// the device the request runs on (it must run on the MLX worker): on the
// CPU a verified row costs nearly a decode step, so unlikely drafts are cut;
// on a GPU rows are nearly free and the cut's wait on the draft is not.
func (e *Engine) confidenceFloor() float64 {
	if f := e.plan.Speculation.ConfidenceFloor; f != nil {
		return *f
	}
	if mlx.CurrentDevice() == mlx.CPU {
		return manifests.DefaultConfidenceFloor
	}
	return 0
}

// seededDepth is the depth of seeded sampled requests: the selector's fixed
// depth, else max_depth, else 7, within what the drafter can produce.
func (e *Engine) seededDepth() int {
	if e.selector {
		return 0 // selector sessions are fixed-depth already
	}
	d := 7
	if e.plan.Speculation.MaxDepth > 0 {
		d = e.plan.Speculation.MaxDepth
	}
	if limit := e.DraftLimit(); limit > 0 {
		d = min(d, limit)
	}
	return d
}

// DraftLimit is the most tokens the draft can propose in one round (a block
// draft's block size − 1, or a plugin drafter's limit); 0 without a draft.
func (e *Engine) DraftLimit() int {
	switch {
	case e.draft != nil:
		bs, _ := e.draft.BlockParams()
		return bs - 1
	case e.drafter != nil:
		return e.drafter.Limit()
	}
	return 0
}

// ErrNoTokenizer is returned for a text prompt when the target folder has no
// tokenizer.json.
var ErrNoTokenizer = errors.New("the target checkpoint has no tokenizer.json: pass token ids instead of text")
