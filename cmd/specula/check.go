package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/manifests"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

func init() {
	register(&command{name: "check", summary: "validate a manifest and show what it would load, without loading weights", run: runCheck})
}

// runCheck decodes and resolves a manifest and prints the plan. Exit codes:
// 0 when the manifest is runnable; 1 with a one-line error on stderr when it
// is not, weights missing included (what could be resolved is still printed
// on stdout); 2 for a usage error.
func runCheck(e *env, args []string) int {
	fs := newFlags(e, "check", "[--json] MANIFEST")
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	addPluginDirFlag(fs)
	rest, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if len(rest) != 1 {
		fmt.Fprintln(e.stderr, "specula check: want exactly one manifest")
		fs.Usage()
		return exitUsage
	}
	path := rest[0]
	rep := checkReport{Manifest: path, Warnings: []string{}}

	m, err := manifests.Load(path)
	if err != nil {
		return rep.finish(e, *asJSON, err)
	}
	rep.Name = m.Name
	gpu, err := mlx.Call(e.ctx, func() (bool, error) { return mlx.CurrentDevice() == mlx.GPU, nil })
	if err != nil {
		return rep.finish(e, *asJSON, err)
	}
	rep.Device = "cpu"
	if gpu {
		rep.Device = "gpu"
	}
	p, err := manifests.Resolve(e.ctx, m, registry.Default, manifests.Options{GPU: gpu, LoadPlugin: loadPlugin, BindTarget: true})
	if err != nil {
		if errors.Is(err, manifests.ErrWeightsMissing) {
			// Nothing was resolved, but the manifest decoded: show it.
			rep.fromManifest(m, gpu)
		}
		return rep.finish(e, *asJSON, err)
	}
	rep.fromPlan(p)
	return rep.finish(e, *asJSON, p.Ready())
}

// checkReport is the output of `specula check`, as text or JSON.
type checkReport struct {
	Manifest    string          `json:"manifest"`
	Name        string          `json:"name,omitempty"`
	OK          bool            `json:"ok"`
	Error       string          `json:"error,omitempty"`
	Device      string          `json:"device,omitempty"`
	Target      *componentOut   `json:"target,omitempty"`
	Draft       *componentOut   `json:"draft,omitempty"`
	Speculation *speculationOut `json:"speculation,omitempty"`
	Sampling    *samplingOut    `json:"sampling,omitempty"`
	// Tokenizer is the target's tokenizer.json, or "" when it has none
	// (then only token-id prompts work); absent when nothing resolved.
	Tokenizer *string  `json:"tokenizer,omitempty"`
	Warnings  []string `json:"warnings"`
}

type componentOut struct {
	Path         string     `json:"path"`
	Dir          string     `json:"dir"`
	Architecture string     `json:"architecture,omitempty"`
	Requested    string     `json:"requested,omitempty"`
	FromConfig   bool       `json:"from_config,omitempty"`
	Source       string     `json:"source,omitempty"`
	Type         string     `json:"type,omitempty"`
	Capabilities []string   `json:"capabilities"`
	Provided     []string   `json:"provided,omitempty"`
	DType        string     `json:"dtype"`
	ModelType    string     `json:"model_type,omitempty"`
	HiddenSize   int        `json:"hidden_size,omitempty"`
	NumLayers    int        `json:"num_layers,omitempty"`
	VocabSize    int        `json:"vocab_size,omitempty"`
	BlockSize    int        `json:"block_size,omitempty"`
	MaskToken    *int32     `json:"mask_token,omitempty"`
	Plugin       string     `json:"plugin,omitempty"`
	SHA256       string     `json:"sha256,omitempty"`
	Weights      *weightOut `json:"weights,omitempty"`
	// Layout is how the weights are stored (headers only): MLX format,
	// quantization, and every group of layers dense or quantized.
	Layout *loader.Layout `json:"layout,omitempty"`
}

type weightOut struct {
	Status  string   `json:"status"`
	Files   []string `json:"files,omitempty"`
	Tensors int      `json:"tensors,omitempty"`
	Bytes   int64    `json:"bytes,omitempty"`
	Problem string   `json:"problem,omitempty"`
}

type speculationOut struct {
	Mode       string `json:"mode"`
	MaxDepth   int    `json:"max_depth"`
	FixedDepth int    `json:"fixed_depth,omitempty"`
	// ConfidenceFloor is the manifest's confidence_floor (absent: the
	// device's default).
	ConfidenceFloor *float64 `json:"confidence_floor,omitempty"`
}

type samplingOut struct {
	Temperature      *float64 `json:"temperature,omitempty"`
	TopK             *int     `json:"top_k,omitempty"`
	TopP             *float64 `json:"top_p,omitempty"`
	MinP             *float64 `json:"min_p,omitempty"`
	RepeatPenalty    *float64 `json:"repeat_penalty,omitempty"`
	PresencePenalty  *float64 `json:"presence_penalty,omitempty"`
	FrequencyPenalty *float64 `json:"frequency_penalty,omitempty"`
	RepeatLastN      *int     `json:"repeat_last_n,omitempty"`
	Seed             *int64   `json:"seed,omitempty"`
	MaxTokens        *int     `json:"max_tokens,omitempty"`
	StopTokens       []int    `json:"stop_tokens,omitempty"`
	StopStrings      []string `json:"stop_strings,omitempty"`
}

func capNames(cs model.Capabilities) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return out
}

// fromManifest fills the report from a decoded manifest whose checkpoints
// could not be found.
func (r *checkReport) fromManifest(m *manifests.Manifest, gpu bool) {
	dtype := m.Target.DType.For(gpu).String()
	r.Target = &componentOut{Path: m.Target.Path, Dir: m.Target.Dir, Architecture: m.Target.Architecture,
		Capabilities: capNames(m.Target.Capabilities), DType: dtype}
	if d := m.Draft; d != nil {
		r.Draft = &componentOut{Path: d.Path, Dir: d.Dir, Architecture: d.Architecture,
			Capabilities: capNames(d.Capabilities), DType: dtype, Plugin: d.Plugin, SHA256: d.SHA256}
	}
	r.Sampling = samplingOf(m.Sampling)
}

func (r *checkReport) fromPlan(p *manifests.Plan) {
	r.Target = componentOf(&p.Target.Component)
	tok := p.Target.Tokenizer
	r.Tokenizer = &tok
	if d := p.Draft; d != nil {
		r.Draft = componentOf(&d.Component)
		r.Draft.Plugin, r.Draft.SHA256 = d.Plugin, d.SHA256
		if d.BlockSize > 0 {
			r.Draft.BlockSize = d.BlockSize
			mask := d.MaskToken
			r.Draft.MaskToken = &mask
		}
	}
	r.Speculation = &speculationOut{Mode: string(p.Speculation.Mode), MaxDepth: p.Speculation.MaxDepth, FixedDepth: p.Speculation.FixedDepth, ConfidenceFloor: p.Speculation.ConfidenceFloor}
	r.Sampling = samplingOf(p.Sampling)
	r.Warnings = append(r.Warnings, p.Warnings...)
}

func componentOf(c *manifests.Component) *componentOut {
	w := c.Weights
	return &componentOut{Path: c.Path, Dir: c.Dir, Architecture: c.Architecture, Requested: c.Requested,
		FromConfig: c.FromConfig, Source: c.Source, Type: c.Type, Capabilities: capNames(c.Capabilities),
		Provided: capNames(c.Provided), DType: c.DType.String(), ModelType: c.ModelType,
		HiddenSize: c.Info.HiddenSize, NumLayers: c.Info.NumLayers, VocabSize: c.Info.VocabSize,
		Weights: &weightOut{Status: string(w.Status), Files: w.Files, Tensors: w.Tensors, Bytes: w.Bytes, Problem: w.Problem},
		Layout:  layoutOf(c)}
}

// layoutOf reads how c's weights are stored from the headers, or nil when
// they are not there to read (their status says why).
func layoutOf(c *manifests.Component) *loader.Layout {
	if c.Weights.Status != manifests.WeightsPresent {
		return nil
	}
	ck, err := loader.OpenCheckpoint(c.Dir)
	if err != nil {
		return nil
	}
	defer ck.Close()
	l, err := ck.Layout()
	if err != nil {
		return nil
	}
	return l
}

func samplingOf(s manifests.Sampling) *samplingOut {
	out := samplingOut{Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, MinP: s.MinP,
		RepeatPenalty: s.RepeatPenalty, PresencePenalty: s.PresencePenalty, FrequencyPenalty: s.FrequencyPenalty,
		RepeatLastN: s.RepeatLastN, Seed: s.Seed, MaxTokens: s.MaxTokens, StopTokens: s.StopTokens, StopStrings: s.StopStrings}
	if describeSampling(&out) == "" {
		return nil // nothing set
	}
	return &out
}

// finish prints the report and returns the exit code: 0 when err is nil,
// else 1 with err as the one line on stderr.
func (r *checkReport) finish(e *env, asJSON bool, err error) int {
	r.OK = err == nil
	if err != nil {
		r.Error = err.Error()
	}
	if asJSON {
		if code := writeReportJSON(e, "check", r); code != exitOK {
			return code
		}
	} else {
		r.writeText(e.stdout)
	}
	if err != nil {
		return fail(e, "check", err)
	}
	return exitOK
}

func (r *checkReport) writeText(w io.Writer) {
	if r.Target == nil {
		return // nothing but the error to say
	}
	fmt.Fprintf(w, "manifest     %s (%s)\n", r.Manifest, r.Name)
	if r.Device != "" {
		fmt.Fprintf(w, "device       %s\n", r.Device)
	}
	writeComponent(w, "target", r.Target)
	if r.Tokenizer != nil {
		if *r.Tokenizer == "" {
			fmt.Fprintf(w, "  tokenizer     none (no tokenizer.json): only token-id prompts work (specula run --ids); text prompts and --chat fail\n")
		} else {
			fmt.Fprintf(w, "  tokenizer     %s\n", *r.Tokenizer)
		}
	}
	if r.Draft != nil {
		writeComponent(w, "draft", r.Draft)
	}
	if s := r.Speculation; s != nil {
		fmt.Fprintf(w, "speculation  %s\n", describeSpeculation(s, r.Draft != nil))
	}
	if s := r.Sampling; s != nil {
		fmt.Fprintf(w, "sampling     %s\n", describeSampling(s))
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if r.OK {
		fmt.Fprintf(w, "ok: %s is runnable (nothing was loaded)\n", r.Manifest)
	}
}

func writeComponent(w io.Writer, label string, c *componentOut) {
	fmt.Fprintf(w, "%-12s %s\n", label, c.Path)
	if c.Path != c.Dir {
		fmt.Fprintf(w, "  folder        %s\n", c.Dir)
	}
	switch {
	case c.Source != "":
		how := c.Source
		if c.FromConfig {
			how = "from config.json, " + how
		}
		if c.Requested != "" && c.Requested != c.Architecture {
			how = fmt.Sprintf("as %s, %s", c.Requested, how)
		}
		fmt.Fprintf(w, "  architecture  %s (%s)\n", c.Architecture, how)
	case c.Architecture != "":
		fmt.Fprintf(w, "  architecture  %s\n", c.Architecture)
	default:
		fmt.Fprintf(w, "  architecture  (config.json's architectures[0])\n")
	}
	caps := strings.Join(c.Capabilities, ", ")
	if len(c.Provided) > len(c.Capabilities) {
		caps += fmt.Sprintf(" (it also provides: %s, unused because not declared)", strings.Join(missingFrom(c.Provided, c.Capabilities), ", "))
	}
	fmt.Fprintf(w, "  capabilities  %s\n", caps)
	if c.Plugin != "" {
		fmt.Fprintf(w, "  plugin        %s (sha256 %s)\n", c.Plugin, c.SHA256)
	}
	fmt.Fprintf(w, "  dtype         %s\n", c.DType)
	if c.HiddenSize > 0 || c.VocabSize > 0 {
		cfg := fmt.Sprintf("hidden size %d, %d layers, vocabulary %d", c.HiddenSize, c.NumLayers, c.VocabSize)
		if c.ModelType != "" {
			cfg += " (model_type " + c.ModelType + ")"
		}
		fmt.Fprintf(w, "  config        %s\n", cfg)
	}
	if c.BlockSize > 0 {
		fmt.Fprintf(w, "  block         %d positions, mask token %d\n", c.BlockSize, *c.MaskToken)
	}
	if l := c.Layout; l != nil {
		format := "Hugging Face"
		if l.Format == "mlx" {
			format = "MLX (format = mlx)"
		}
		counts := map[string]int{}
		for _, g := range l.Groups {
			counts[g.Storage] += g.Count
		}
		var parts []string
		for _, st := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
		}
		fmt.Fprintf(w, "  layout        %s; quantization %s; layers: %s (specula inspect lists them by group)\n", format, orDash(l.Quantization), strings.Join(parts, ", "))
	}
	if wt := c.Weights; wt != nil {
		switch wt.Status {
		case string(manifests.WeightsPresent):
			fmt.Fprintf(w, "  weights       present: %s (%d tensors, %s)\n", strings.Join(wt.Files, ", "), wt.Tensors, byteSize(wt.Bytes))
		case string(manifests.WeightsNone):
			fmt.Fprintf(w, "  weights       none (weights = false)\n")
		default:
			fmt.Fprintf(w, "  weights       %s: %s\n", wt.Status, wt.Problem)
		}
	}
}

func missingFrom(all, some []string) []string {
	var out []string
	for _, a := range all {
		found := false
		for _, s := range some {
			found = found || s == a
		}
		if !found {
			out = append(out, a)
		}
	}
	return out
}

func describeSpeculation(s *speculationOut, haveDraft bool) string {
	floor := fmt.Sprintf("; drafts verified while their confidence is at least %g on the CPU, all on a GPU (default)", manifests.DefaultConfidenceFloor)
	if f := s.ConfidenceFloor; f != nil && *f > 0 {
		floor = fmt.Sprintf("; drafts verified while their confidence is at least %g", *f)
	} else if f != nil {
		floor = "; every draft verified"
	}
	switch manifests.Mode(s.Mode) {
	case manifests.ModeSelector:
		return fmt.Sprintf("selector session, fixed depth %d", s.FixedDepth) + floor
	case manifests.ModeBlock:
		if s.MaxDepth > 0 {
			return fmt.Sprintf("block drafts, adaptive depth capped at %d", s.MaxDepth) + floor
		}
		return "block drafts, adaptive depth" + floor
	}
	if haveDraft {
		return "off (the draft is loaded but does not propose)"
	}
	return "off (no draft)"
}

func describeSampling(s *samplingOut) string {
	var parts []string
	f := func(name string, v *float64) {
		if v != nil {
			parts = append(parts, name+" "+strconv.FormatFloat(*v, 'g', -1, 64))
		}
	}
	i := func(name string, v *int) {
		if v != nil {
			parts = append(parts, fmt.Sprintf("%s %d", name, *v))
		}
	}
	f("temperature", s.Temperature)
	i("top_k", s.TopK)
	f("top_p", s.TopP)
	f("min_p", s.MinP)
	f("repeat_penalty", s.RepeatPenalty)
	f("presence_penalty", s.PresencePenalty)
	f("frequency_penalty", s.FrequencyPenalty)
	i("repeat_last_n", s.RepeatLastN)
	if s.Seed != nil {
		parts = append(parts, fmt.Sprintf("seed %d", *s.Seed))
	}
	i("max_tokens", s.MaxTokens)
	var stops []string
	for _, t := range s.StopTokens {
		stops = append(stops, strconv.Itoa(t))
	}
	for _, t := range s.StopStrings {
		stops = append(stops, strconv.Quote(t))
	}
	if len(stops) > 0 {
		parts = append(parts, "stop "+strings.Join(stops, " "))
	}
	return strings.Join(parts, ", ")
}

// byteSize formats n bytes with a binary unit.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
