package manifests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/specula-dev/specula/internal/jsonerr"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

// Options are the facts about the run that Resolve cannot read from the
// manifest.
type Options struct {
	// GPU says the run computes on a GPU (mlx.CurrentDevice() == mlx.GPU).
	// It decides dtype "auto" (bfloat16 on a GPU, float32 on the CPU) and
	// whether bfloat16 and float16 need allow_slow_dtype.
	GPU bool
	// LoadPlugin makes the plugin a [draft] names available: it finds the
	// binary whose SHA-256 is sha256, starts it, checks its Describe, and
	// registers its architectures into reg with registry.AddPlugin (doing
	// nothing when they are already there). Nil means this program has no
	// plugin host, and manifests naming a plugin are refused.
	LoadPlugin func(ctx context.Context, name, sha256 string, reg *registry.Registry) error
	// TargetOnly resolves the [target] alone, as if the manifest had no
	// [draft]: the draft's folder is not read, its architecture not looked
	// up, its plugin not started (for a run that decodes plainly anyway).
	TargetOnly bool
	// BindTarget binds the target's tensors too, as drafts' are (names,
	// shapes, quantization; nothing is read), so that a target folder whose
	// config.json does not describe its tensors is refused here (specula
	// check) rather than reported runnable. A load binds them anyway.
	BindTarget bool
}

// maxConfigSize bounds config.json; real ones are a few kilobytes.
const maxConfigSize = 16 << 20

// Resolve checks m against its checkpoints and reg (registry.Default when
// nil) and returns what would be loaded. In order, and before any weight data
// is read:
//
//  1. the target's dtype suits the device (bfloat16 and float16 on the CPU
//     need allow_slow_dtype);
//  2. each checkpoint folder exists and holds a config.json, which is read;
//  3. each architecture (the manifest's, else config.json's
//     architectures[0]) is registered, with the right kind; a plugin
//     architecture is served by the plugin the manifest names with its
//     checksum, and a built-in one is not named as a plugin. A [draft] that
//     names a plugin gets that plugin's architecture
//     (registry.LookupPlugin), even where a built-in has the same name;
//     one that names none gets a built-in;
//  4. each constructor accepts its config (a failure is ErrInit, distinct
//     from an unknown name, ErrArchitecture);
//  5. every declared capability is in the entry's record;
//  6. the plan exposes only the declared capabilities;
//  7. the draft fits the target: a draft that uses its target
//     (model.TargetUser) needs a target declaring "draft-target"; vocabulary
//     and hidden sizes agree where both report them, the mask token is in
//     the vocabulary, and AttachTarget accepts the target (tap ids, ...);
//  8. stop token ids are inside the target's vocabulary.
//
// Then the weight files are inspected from their headers (Plan.Weights,
// Plan.Ready): missing weights do not make Resolve fail, so a caller can
// still show the plan. A missing checkpoint folder or config.json does, with
// an *Error of kind ErrWeightsMissing. Every other failure is an *Error of
// the kinds listed with the Err* sentinels.
//
// Constructors and AttachTarget run on the MLX worker (mlx.Do): they may
// create small arrays, which they must pin to keep.
func Resolve(ctx context.Context, m *Manifest, reg *registry.Registry, opts Options) (*Plan, error) {
	if reg == nil {
		reg = registry.Default
	}
	r := &resolver{ctx: ctx, m: m, reg: reg, opts: opts}
	return r.run()
}

type resolver struct {
	ctx  context.Context
	m    *Manifest
	reg  *registry.Registry
	opts Options
	plan *Plan
}

// part is a [target] or [draft] being resolved.
type part struct {
	table string // "target" or "draft"
	kind  registry.Kind
	ck    *Checkpoint
	comp  *Component
	cfg   json.RawMessage
	entry *registry.Entry
}

func (r *resolver) errorf(key string, k error, format string, args ...any) *Error {
	return &Error{File: r.m.Path, Line: r.m.line(key), Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// keyOr returns "table.key" when the manifest has that key, else
// "table.fallback".
func (r *resolver) keyOr(table, key, fallback string) string {
	if r.m.line(table+"."+key) > 0 {
		return table + "." + key
	}
	return table + "." + fallback
}

func (r *resolver) run() (*Plan, error) {
	m := r.m
	dt := m.Target.DType.For(r.opts.GPU)
	r.plan = &Plan{Manifest: m.Path, Name: m.Name, GPU: r.opts.GPU, Sampling: m.Sampling}

	// 1. The dtype against the device.
	if !r.opts.GPU && dt != mlx.Float32 && !m.Target.AllowSlowDType {
		return nil, r.errorf("target.dtype", ErrDType,
			`[target] dtype = %q on the CPU: MLX's CPU backend is only fast for float32; use dtype = "float32" (or "auto"), or set allow_slow_dtype = true to run it anyway`, m.Target.DType)
	}

	parts := []*part{{table: "target", kind: registry.KindTarget, ck: &m.Target.Checkpoint}}
	r.plan.Target = &TargetPlan{}
	parts[0].comp = &r.plan.Target.Component
	if m.Draft != nil && !r.opts.TargetOnly {
		r.plan.Draft = &DraftPlan{Plugin: m.Draft.Plugin, SHA256: m.Draft.SHA256}
		parts = append(parts, &part{table: "draft", kind: registry.KindDraft, ck: &m.Draft.Checkpoint, comp: &r.plan.Draft.Component})
	}
	for _, p := range parts {
		p.comp.Path, p.comp.Dir, p.comp.DType = p.ck.Path, p.ck.Dir, dt
	}

	// 2. Checkpoint folders and config.json, reporting every missing one.
	// The error sits on the line of the first missing folder's path.
	var missing []string
	var first string
	for _, p := range parts {
		miss, err := r.readConfig(p)
		if err != nil {
			return nil, err
		}
		if miss != "" {
			missing = append(missing, miss)
			if first == "" {
				first = p.table
			}
		}
	}
	if len(missing) > 0 {
		return nil, r.errorf(first+".path", ErrWeightsMissing, "weights missing: %s", strings.Join(missing, "; "))
	}

	// The tokenizer is optional (without it only token-id prompts work);
	// callers learn which before any weight is read.
	if tok := filepath.Join(m.Target.Dir, "tokenizer.json"); fileExists(tok) {
		r.plan.Target.Tokenizer = tok
	}

	// 3. Architectures resolve, with the right kind and source.
	for _, p := range parts {
		if err := r.lookup(p); err != nil {
			return nil, err
		}
	}

	// 4. Constructors, then 7's AttachTarget, on the MLX worker.
	var fitErr error
	err := mlx.Do(r.ctx, func() (err error) {
		// Architecture code runs here; a panic in it is a failure to
		// initialise, not a crash of the caller.
		defer func() {
			if v := recover(); v != nil {
				err = &Error{File: m.Path, Kind: ErrInit, Msg: fmt.Sprintf("an architecture panicked while being built or attached: %v", v)}
			}
		}()
		for _, p := range parts {
			if err := r.build(p, dt); err != nil {
				return err
			}
		}
		// 5 and 6 need only the records; they run here, between building
		// and attaching, so that a failure never leaves taps set.
		for _, p := range parts {
			if err := r.checkCapabilities(p); err != nil {
				return err
			}
		}
		if len(parts) == 2 {
			fitErr = r.fit(parts[0], parts[1])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if fitErr != nil {
		return nil, fitErr
	}

	// 8. Stop tokens inside the vocabulary.
	if v := r.plan.Target.Info.VocabSize; v > 0 {
		for _, id := range m.Sampling.StopTokens {
			if id >= v {
				return nil, r.errorf("sampling.stop", ErrValue,
					"[sampling] stop token id %d is outside the target's vocabulary [0, %d)", id, v)
			}
		}
	}

	// Weights, headers only.
	var problems []string
	firstKey, anyMissing := "", false
	for _, p := range parts {
		if p.table == "draft" && m.Draft.Weightless {
			p.comp.Weights = Weights{Status: WeightsNone}
			if hasWeightFiles(p.ck.Dir) {
				r.warnf("[draft] weights = false, but %s holds weight files: specula neither checks nor loads them", p.ck.Path)
			}
			continue
		}
		p.comp.Weights = inspectWeights(p.ck)
		if (p.table == "draft" || r.opts.BindTarget) && p.comp.Weights.Status == WeightsPresent {
			p.comp.Weights = r.bindWeights(p)
		}
		w := p.comp.Weights
		if w.Status == WeightsPresent {
			continue
		}
		if firstKey == "" {
			firstKey = p.table + ".path"
		}
		anyMissing = anyMissing || w.Status == WeightsMissing
		problems = append(problems, w.Problem)
	}
	if len(problems) > 0 {
		k, label := ErrWeightsInvalid, "invalid weights"
		if anyMissing {
			k, label = ErrWeightsMissing, "weights missing"
		}
		r.plan.readyErr = r.errorf(firstKey, k, "%s: %s", label, strings.Join(problems, "; "))
	}

	r.speculation()
	for _, w := range r.plan.Warnings {
		slog.Debug("manifests: warning", "manifest", m.Path, "warning", w)
	}
	return r.plan, nil
}

// weightBinder is what bindWeights needs of an architecture instance.
type weightBinder interface {
	LoadWeights(map[string]*mlx.Array) error
}

// bindWeights binds p's checkpoint through its architecture's own
// LoadWeights, lazily: names, shapes, quantization and dtypes are checked as
// a load checks them, but no tensor data is read (MLX reads a tensor only
// when it is evaluated; the engine binds again when it loads). A folder
// holding another architecture's tensors, or a config.json of another
// checkpoint, is refused here rather than after the target has loaded.
// Drafts are always bound (they are small); the target only with
// Options.BindTarget, since a run binds it when it loads anyway. A plugin
// draft's instance (a proxy) has no LoadWeights: its plugin binds its
// tensors (AttachTarget).
func (r *resolver) bindWeights(p *part) Weights {
	w := p.comp.Weights
	b, ok := p.comp.instance.(weightBinder)
	if !ok {
		return w
	}
	err := mlx.Do(r.ctx, func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("%s panicked while binding its tensors: %v", p.entry.Name, v)
			}
		}()
		c, err := loader.OpenCheckpoint(p.ck.Dir)
		if err != nil {
			return err
		}
		defer c.Close()
		tensors, err := c.Arrays()
		if err != nil {
			return err
		}
		return b.LoadWeights(tensors)
	})
	if err == nil {
		return w
	}
	// One line: the summary, then how many lines of detail run would show.
	msg, rest, multi := strings.Cut(err.Error(), "\n")
	if multi {
		slog.Debug("manifests: tensors do not fit", "manifest", r.m.Path, "error", err.Error())
		msg += fmt.Sprintf(" (and %d more lines: SPECULA_LOG=debug shows them)", strings.Count(rest, "\n")+1)
	}
	return Weights{Status: WeightsInvalid, Err: err, Problem: fmt.Sprintf(
		"%s: its tensors do not fit %s as its config.json describes it (is it another architecture's checkpoint, or its config.json another's?): %s",
		p.ck.Path, p.entry.Name, msg)}
}

// readConfig reads p's config.json. A missing folder or file is returned as
// a description for the "weights missing" error; anything else is an error.
func (r *resolver) readConfig(p *part) (missing string, err error) {
	ck := p.ck
	st, err := os.Stat(ck.Dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("[%s] checkpoint folder %s not found — %s", p.table, ck.Path, downloadHint(ck)), nil
	case err != nil:
		return "", &Error{File: r.m.Path, Line: r.m.line(p.table + ".path"), Kind: ErrRead,
			Msg: fmt.Sprintf("[%s] path %s: %v", p.table, ck.Path, err), Err: err}
	case !st.IsDir():
		return "", r.errorf(p.table+".path", ErrValue,
			"[%s] path %s is a file, not a checkpoint folder; name the folder that holds config.json and the *.safetensors files", p.table, ck.Path)
	}
	cfgPath := filepath.Join(ck.Dir, "config.json")
	shown := filepath.Join(ck.Path, "config.json")
	f, err := os.Open(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("[%s] %s not found — the checkpoint is incomplete; %s", p.table, shown, downloadHint(ck)), nil
	}
	if err != nil {
		return "", &Error{File: r.m.Path, Line: r.m.line(p.table + ".path"), Kind: ErrRead,
			Msg: fmt.Sprintf("[%s] %s: %v", p.table, shown, err), Err: err}
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err == nil && len(raw) > maxConfigSize {
		err = fmt.Errorf("larger than %d bytes", maxConfigSize)
	}
	if err != nil {
		return "", &Error{File: r.m.Path, Line: r.m.line(p.table + ".path"), Kind: ErrRead,
			Msg: fmt.Sprintf("[%s] %s: %v", p.table, shown, err), Err: err}
	}
	var head struct {
		Architectures []string `json:"architectures"`
		ModelType     string   `json:"model_type"`
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", &Error{File: r.m.Path, Line: r.m.line(p.table + ".path"), Kind: ErrConfig,
			Msg: fmt.Sprintf("[%s] %s is not a JSON object: %v; fix it or download the checkpoint again", p.table, shown, jsonerr.Explain(raw, err)), Err: err}
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return "", &Error{File: r.m.Path, Line: r.m.line(p.table + ".path"), Kind: ErrConfig,
			Msg: fmt.Sprintf("[%s] %s: architectures must be a list of class names and model_type a string: %v", p.table, shown, jsonerr.Explain(raw, err)), Err: err}
	}
	p.cfg = raw
	p.comp.ModelType = head.ModelType
	var fromConfig string
	if len(head.Architectures) > 0 {
		fromConfig = head.Architectures[0]
	}
	switch {
	case ck.Architecture != "":
		p.comp.Requested = ck.Architecture
		if fromConfig != "" && fromConfig != ck.Architecture {
			r.warnf("[%s] architecture %q overrides %s's %q", p.table, ck.Architecture, shown, fromConfig)
		}
	case fromConfig != "":
		p.comp.Requested, p.comp.FromConfig = fromConfig, true
	default:
		return "", r.errorf(p.table+".path", ErrConfig,
			`[%s] %s has no architectures list; set architecture = "<class name>" in [%s] (see specula archs)`, p.table, shown, p.table)
	}
	return "", nil
}

// fileExists reports whether path is a regular file (or a link to one).
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// downloadHint tells how to fetch a checkpoint.
func downloadHint(ck *Checkpoint) string {
	if ck.Repo != "" {
		return fmt.Sprintf("download it: hf download %s --local-dir %s", ck.Repo, ck.Dir)
	}
	return "download the checkpoint into " + ck.Dir
}

func (r *resolver) warnf(format string, args ...any) {
	r.plan.Warnings = append(r.plan.Warnings, fmt.Sprintf(format, args...))
}

// describe names the architecture as the manifest chose it, for messages.
func (p *part) describe() string {
	if p.comp.FromConfig {
		return fmt.Sprintf("architecture %q (config.json architectures[0])", p.comp.Requested)
	}
	return fmt.Sprintf("architecture %q", p.comp.Requested)
}

func (r *resolver) lookup(p *part) error {
	key := r.keyOr(p.table, "architecture", "path")
	plugin := ""
	if p.kind == registry.KindDraft {
		plugin = r.m.Draft.Plugin
	}
	if plugin != "" {
		if r.opts.LoadPlugin == nil {
			return r.errorf("draft.plugin", ErrPlugin,
				"[draft] plugin %q: this program cannot run plugins; use a built-in architecture (see specula archs)", plugin)
		}
		if err := r.opts.LoadPlugin(r.ctx, plugin, r.m.Draft.SHA256, r.reg); err != nil {
			return &Error{File: r.m.Path, Line: r.m.line("draft.plugin"), Kind: ErrPlugin,
				Msg: fmt.Sprintf("[draft] plugin %q: %v", plugin, err), Err: err}
		}
		return r.lookupPlugin(p, plugin, key)
	}
	e, err := r.reg.Lookup(p.comp.Requested)
	if err != nil {
		var ue *registry.UnknownError
		if !errors.As(err, &ue) {
			return err
		}
		msg := fmt.Sprintf("[%s] %s is not registered", p.table, p.describe())
		if len(ue.Known) == 0 {
			// Only a program embedding the engine gets here (cmd/specula
			// imports arch/all): a plugin author's test, typically.
			msg += "; no architectures are registered in this program (a program that loads manifests registers specula's own by importing github.com/specula-dev/specula/arch/all)"
		} else {
			msg += "; known: " + strings.Join(ue.Known, ", ")
			if s := suggest(p.comp.Requested, ue.Known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
		}
		return &Error{File: r.m.Path, Line: r.m.line(key), Kind: ErrArchitecture, Msg: msg, Err: err}
	}
	if err := r.checkKind(p, e, key); err != nil {
		return err
	}
	if served := e.Plugin(); served != "" {
		if p.kind == registry.KindTarget {
			return r.errorf(key, ErrPlugin, "[target] %s is served by plugin %q; plugins serve drafts only", p.describe(), served)
		}
		return r.errorf(key, ErrPlugin,
			`[draft] %s is served by plugin %q; name it with plugin = %q and the binary's checksum sha256 = "..."`, p.describe(), served, served)
	}
	p.use(e)
	return nil
}

// lookupPlugin finds the draft architecture that plugin serves under the
// requested name. The plugin's entry is found even when a built-in (or
// another plugin) has the same name: a manifest naming a plugin always means
// the plugin's architecture.
func (r *resolver) lookupPlugin(p *part, plugin, key string) error {
	e, err := r.reg.LookupPlugin(plugin, p.comp.Requested)
	if err != nil {
		var ue *registry.UnknownError
		if !errors.As(err, &ue) {
			return err
		}
		serves := "it serves no architectures"
		if len(ue.Known) > 0 {
			serves = "it serves " + strings.Join(ue.Known, ", ")
			if s := suggest(p.comp.Requested, ue.Known); s != "" {
				serves += fmt.Sprintf(" (did you mean %q?)", s)
			}
		}
		msg := fmt.Sprintf("[%s] plugin %q does not serve %s — %s", p.table, plugin, p.describe(), serves)
		other, lerr := r.reg.Lookup(p.comp.Requested)
		if lerr != nil {
			return &Error{File: r.m.Path, Line: r.m.line(key), Kind: ErrArchitecture, Msg: msg, Err: err}
		}
		// The name exists from another source: say which, and how to use it.
		if o := other.Plugin(); o != "" {
			msg += fmt.Sprintf("; plugin %s serves that name: set plugin = %q and its sha256 to use it", o, o)
		} else {
			msg += "; a built-in architecture has that name: remove plugin and sha256 to use it"
		}
		return &Error{File: r.m.Path, Line: r.m.line("draft.plugin"), Kind: ErrPlugin, Msg: msg, Err: err}
	}
	if err := r.checkKind(p, e, key); err != nil {
		return err
	}
	p.use(e)
	return nil
}

// checkKind refuses an entry of the wrong kind for p.
func (r *resolver) checkKind(p *part, e *registry.Entry, key string) error {
	if e.Kind == p.kind {
		return nil
	}
	var same []string
	for _, o := range r.reg.Entries() {
		if o.Kind == p.kind && !slices.Contains(same, o.Name) {
			same = append(same, o.Name)
		}
	}
	return r.errorf(key, ErrArchitecture, "[%s] %s is a %s architecture; [%s] needs a %s (known %ss: %s)",
		p.table, p.describe(), e.Kind, p.table, p.kind, p.kind, orNone(same))
}

// use records the resolved entry e for p.
func (p *part) use(e *registry.Entry) {
	p.entry = e
	p.comp.Architecture, p.comp.Source, p.comp.Type, p.comp.Provided = e.Name, e.Source, e.Type, e.Capabilities
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// build constructs p's weightless instance (step 4).
func (r *resolver) build(p *part, dt mlx.DType) error {
	v, _, err := r.reg.Build(p.entry.Key(), registry.Config{Dir: p.ck.Dir, JSON: p.cfg, DType: dt})
	if err != nil {
		var ie *registry.InitError
		detail := err.Error()
		if errors.As(err, &ie) {
			detail = ie.Err.Error()
		}
		// Constructors name the file as "config.json"; the message names it
		// with its path already.
		detail = strings.TrimPrefix(detail, "config.json: ")
		return &Error{File: r.m.Path, Line: r.m.line(r.keyOr(p.table, "architecture", "path")), Kind: ErrInit,
			Msg: fmt.Sprintf("[%s] architecture %s failed to initialise from %s: %s",
				p.table, p.entry.Name, filepath.Join(p.ck.Path, "config.json"), detail), Err: err}
	}
	p.comp.instance = v
	if in, ok := v.(interface{ Info() model.Info }); ok {
		p.comp.Info = in.Info()
	}
	return nil
}

// checkCapabilities checks that every declared capability is in the record
// (step 5) and exposes exactly the declared ones (step 6).
func (r *resolver) checkCapabilities(p *part) error {
	for _, c := range p.ck.Capabilities {
		if p.entry.Capabilities.Contains(c) {
			continue
		}
		if pl := p.entry.Plugin(); pl != "" {
			return r.errorf(p.table+".capabilities", ErrCapability,
				"[%s] declares capability %q but plugin %s's %s does not declare it (its Describe lists: %s)",
				p.table, c, pl, p.entry.Name, p.entry.Capabilities)
		}
		return r.errorf(p.table+".capabilities", ErrCapability,
			"[%s] declares capability %q but %s does not implement %s (it provides: %s)",
			p.table, c, p.entry.Name, c.InterfaceName(), p.entry.Capabilities)
	}
	p.comp.Capabilities = slices.Clone(p.ck.Capabilities)
	return nil
}

// fit checks that the draft suits the target (step 7).
func (r *resolver) fit(target, draft *part) error {
	tn, dn := target.entry.Name, draft.entry.Name
	fitErr := func(format string, args ...any) error {
		return r.errorf("draft.path", ErrFit, "draft %s does not fit target %s: %s", dn, tn, fmt.Sprintf(format, args...))
	}
	ti, di := target.comp.Info, draft.comp.Info
	if ti.VocabSize > 0 && di.VocabSize > 0 && ti.VocabSize != di.VocabSize {
		return fitErr("vocabulary %d differs from the target's %d", di.VocabSize, ti.VocabSize)
	}
	if ti.HiddenSize > 0 && di.HiddenSize > 0 && ti.HiddenSize != di.HiddenSize {
		return fitErr("hidden size %d differs from the target's %d", di.HiddenSize, ti.HiddenSize)
	}
	if bd, ok := capability[model.BlockDraft](draft.comp, model.CapBlockDraft); ok {
		block, mask := bd.BlockParams()
		if block < 2 {
			return fitErr("block size %d is below 2", block)
		}
		if mask < 0 || (ti.VocabSize > 0 && int(mask) >= ti.VocabSize) {
			return fitErr("mask token %d is outside the target's vocabulary [0, %d)", mask, ti.VocabSize)
		}
		r.plan.Draft.BlockSize, r.plan.Draft.MaskToken = block, mask
	}
	user, ok := draft.comp.instance.(model.TargetUser)
	if !ok {
		return nil
	}
	dt, ok := capability[model.DraftTarget](target.comp, model.CapDraftTarget)
	if !ok {
		why := fmt.Sprintf("draft %s uses its target's embeddings, head and layer taps (model.TargetUser)", dn)
		if plugin := draft.entry.Plugin(); plugin != "" {
			// The host's proxy is a TargetUser for every plugin draft; a
			// token-level one reads nothing but the target's sizes.
			why = fmt.Sprintf("a plugin draft (%s of plugin %s) is given its target through it, whatever the draft reads (sizes only, or feature rows too)", dn, plugin)
		}
		return r.errorf("target.capabilities", ErrFit,
			`[target] must declare capability "draft-target": %s, and %s%s`, why, tn, providesDraftTarget(target.entry))
	}
	if err := attach(user, dt); err != nil {
		return &Error{File: r.m.Path, Line: r.m.line("draft.path"), Kind: ErrFit,
			Msg: fmt.Sprintf("draft %s does not fit target %s: %v", dn, tn, err), Err: err}
	}
	return nil
}

func providesDraftTarget(e *registry.Entry) string {
	if e.Capabilities.Contains(model.CapDraftTarget) {
		return ` provides it: add "draft-target" to [target] capabilities`
	}
	return " does not implement model.DraftTarget: pair the draft with a target that does"
}

// attach calls AttachTarget, turning a panic into an error.
func attach(u model.TargetUser, t model.DraftTarget) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("AttachTarget panicked: %v", p)
		}
	}()
	return u.AttachTarget(t)
}

// speculation decides the mode and depths, and warns about settings that
// have no effect.
func (r *resolver) speculation() {
	s, d := r.m.Speculation, r.plan.Draft
	sp := SpeculationPlan{Mode: ModeOff, MaxDepth: s.MaxDepth, ConfidenceFloor: s.ConfidenceFloor}
	hasSpec := r.m.line("speculation") > 0
	switch {
	case d == nil:
		if hasSpec && !r.opts.TargetOnly {
			r.warnf("[speculation] has no effect without a [draft]")
		}
	case !s.Enabled:
		// The draft is still loaded and kept level (spec/speculation.md 5.1).
	case d.Capabilities.Contains(model.CapSelector):
		sp.Mode = ModeSelector
		sp.FixedDepth = s.SelectorDepth
		if s.MaxDepth > 0 && s.MaxDepth < sp.FixedDepth {
			sp.FixedDepth = s.MaxDepth
		}
	case d.Capabilities.Contains(model.CapBlockDraft):
		sp.Mode = ModeBlock
	default:
		r.warnf(`[draft] declares neither "block-draft" nor "selector": the speculation core drives block drafts only, so generation decodes plainly`)
	}
	if sp.Mode != ModeSelector && d != nil && r.m.line("speculation.selector_depth") > 0 {
		r.warnf("[speculation] selector_depth applies only to a draft declaring \"selector\"; it has no effect here")
	}
	r.plan.Speculation = sp
}
