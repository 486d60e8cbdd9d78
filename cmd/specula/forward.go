package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

func init() {
	register(&command{name: "forward", summary: "run one forward over token ids and save logits and hidden states (bring-up)", run: runForward})
}

// runForward runs one forward of a checkpoint over the given ids and writes
// float32 tensors: logits [T, V], final_hidden [T, H] (after the final
// norm) and hidden.<i> [T, H] (transformers' hidden_states[i+1]: the
// residual stream after decoder layer i, and for the last layer the final-
// normed state, as transformers records it; for every layer unless --layers
// is given; only for architectures that expose layer taps). The output appears whole or not at all: it is written
// to a temporary file beside it and renamed. Exit codes: 0 written, 1
// failure, 2 usage error.
func runForward(e *env, args []string) int {
	fs := newFlags(e, "forward", "--model DIR --ids 1,2,3 [--layers 0,2] [--dtype float32] --out out.safetensors")
	dir := fs.String("model", "", "checkpoint folder: config.json and model.safetensors (or a sharded index)")
	idsFlag := fs.String("ids", "", "comma-separated token ids, forwarded from slot 0")
	layersFlag := fs.String("layers", "", "comma-separated decoder layers to save as hidden.<i> (default: every layer)")
	dtypeFlag := fs.String("dtype", "float32", "compute dtype: float32 (CPU), bfloat16 or float16 (GPU)")
	out := fs.String("out", "", "output safetensors file")
	rest, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	usage := func(msg string) int {
		fmt.Fprintf(e.stderr, "specula forward: %s\n", msg)
		fs.Usage()
		return exitUsage
	}
	if len(rest) > 0 {
		return usage(fmt.Sprintf("unexpected argument %q", rest[0]))
	}
	if *dir == "" || *idsFlag == "" || *out == "" {
		return usage("--model, --ids and --out are required")
	}
	ids, err := parseInts(*idsFlag)
	if err != nil {
		return usage("--ids: " + err.Error())
	}
	var layers []int
	if *layersFlag != "" {
		if layers, err = parseInts(*layersFlag); err != nil {
			return usage("--layers: " + err.Error())
		}
		slices.Sort(layers)
		layers = slices.Compact(layers)
	}
	dtype, err := mlx.ParseDType(*dtypeFlag)
	if err != nil {
		return usage("--dtype: " + err.Error())
	}
	// Where the output cannot go is said now, in the user's names: found
	// at the end, it cost the whole forward and named a temporary file.
	if fi, err := os.Stat(*out); err == nil && fi.IsDir() {
		return usage(fmt.Sprintf("--out %s is a folder: name the .safetensors file to write", *out))
	}
	if parent := filepath.Dir(*out); !isDir(parent) {
		return usage(fmt.Sprintf("--out %s: folder %s does not exist", *out, parent))
	}

	req := forwardRequest{dir: *dir, ids: ids, layers: layers, dtype: dtype, out: *out}
	var summary string
	err = mlx.Do(e.ctx, func() error {
		var err error
		summary, err = req.run()
		return err
	})
	if err != nil {
		return fail(e, "forward", err)
	}
	fmt.Fprintln(e.stdout, summary)
	return exitOK
}

// forwardRequest is one parsed `specula forward`.
type forwardRequest struct {
	dir    string
	ids    []int
	layers []int // nil: every layer
	dtype  mlx.DType
	out    string
}

// run does the work on the MLX worker and returns the summary line.
func (r forwardRequest) run() (string, error) {
	ck, err := loader.OpenCheckpoint(r.dir)
	if err != nil {
		return "", err
	}
	defer ck.Close()
	if ck.Config == nil || ck.Config.Architecture == "" {
		return "", fmt.Errorf("%s: config.json is missing or has no architectures[0]", r.dir)
	}
	abs, err := filepath.Abs(ck.Dir)
	if err != nil {
		return "", err
	}
	v, _, err := registry.Default.Build(ck.Config.Architecture, registry.Config{Dir: abs, JSON: ck.Config.Raw, DType: r.dtype})
	if err != nil {
		return "", err
	}
	m, ok := v.(model.Model)
	if !ok {
		return "", fmt.Errorf("architecture %s is a draft, not a target: forward runs target models only", ck.Config.Architecture)
	}
	info := m.Info()
	for _, id := range r.ids {
		if id < 0 || id >= info.VocabSize {
			return "", fmt.Errorf("--ids: token %d is outside the vocabulary [0, %d)", id, info.VocabSize)
		}
	}
	taps := r.layers
	dt, canTap := m.(model.DraftTarget)
	switch {
	case canTap && taps == nil:
		taps = make([]int, info.NumLayers)
		for i := range taps {
			taps[i] = i
		}
	case !canTap && taps != nil:
		return "", fmt.Errorf("--layers: architecture %s does not expose layer taps (it is not a draft-target)", ck.Config.Architecture)
	}
	if canTap {
		if err := dt.SetLayerTaps(taps); err != nil {
			return "", fmt.Errorf("--layers: %w", err)
		}
	}

	tensors, err := loadCheckpointTensors(ck)
	if err != nil {
		return "", err
	}
	if err := m.LoadWeights(tensors); err != nil {
		return "", err
	}
	if h, ok := m.(model.WeightHolder); ok {
		// Read the checkpoint now, so a bad file fails here and not as a
		// forward error.
		if err := mlx.Eval(h.Weights()...); err != nil {
			return "", fmt.Errorf("reading the weights: %w", err)
		}
	}
	mlx.Sweep() // the tensors the model did not keep

	caches := m.NewCaches()
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	ids32 := make([]int32, len(r.ids))
	for i, id := range r.ids {
		ids32[i] = int32(id)
	}
	T, H := len(ids32), info.HiddenSize
	hidden, aux := m.Forward(&model.Batch{InputIDs: mlx.FromInt32s(ids32, 1, T), SeqOffsets: []int{0}}, caches)
	f32 := func(a *mlx.Array, cols int) *mlx.Array { return mlx.Reshape(mlx.AsType(a, mlx.Float32), T, cols) }
	outputs := map[string]*mlx.Array{
		"logits":       f32(m.Unembed(hidden), info.VocabSize),
		"final_hidden": f32(hidden, H),
	}
	for i, layer := range taps {
		outputs[fmt.Sprintf("hidden.%d", layer)] = f32(mlx.SliceAxis(aux, 2, i*H, (i+1)*H), H)
	}
	meta := map[string]string{
		"format":       "specula forward",
		"architecture": ck.Config.Architecture,
		"model":        abs,
		"ids":          joinInts(r.ids),
		"dtype":        r.dtype.String(),
	}
	if err := saveAtomically(r.out, outputs, meta); err != nil {
		return "", err
	}
	return fmt.Sprintf("wrote %s: logits [%d %d], final_hidden [%d %d], %d hidden states (layers %s) from %s",
		r.out, T, info.VocabSize, T, H, len(taps), joinInts(taps), ck.Config.Architecture), nil
}

// loadCheckpointTensors maps every tensor the checkpoint lists to a lazy MLX
// array, shard by shard (the loader has validated the files).
func loadCheckpointTensors(ck *loader.Checkpoint) (map[string]*mlx.Array, error) {
	listed := map[string]bool{}
	for _, t := range ck.Tensors() {
		listed[t.Name] = true
	}
	out := make(map[string]*mlx.Array, len(listed))
	for _, shard := range ck.Shards() {
		m, err := mlx.LoadSafetensors(shard.Path())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", shard.Path(), err)
		}
		for name, a := range m {
			if listed[name] {
				out[name] = a
			}
		}
	}
	return out, nil
}

// saveAtomically evaluates and writes arrays to path through a temporary
// file in the same folder, so path is never left half-written.
func saveAtomically(path string, arrays map[string]*mlx.Array, meta map[string]string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*.safetensors")
	if err != nil {
		return err
	}
	name := tmp.Name()
	// CreateTemp makes the file private (0600); MLX rewrites it in place,
	// keeping the mode, and renamed to path it gets the mode
	// os.WriteFile(path, b, 0o644) would give.
	err = tmp.Chmod(0o644)
	tmp.Close()
	if err != nil {
		os.Remove(name)
		return err
	}
	defer removeOnForcedExit(name)()
	// MLX writes the file itself (and would add a .safetensors suffix if
	// the name lacked one: the temporary name has it).
	if err := mlx.SaveSafetensors(name, arrays, meta); err != nil {
		os.Remove(name)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return err
	}
	return nil
}

// isDir reports whether path is a folder.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// parseInts reads a comma-separated list of non-negative integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a non-negative integer (want a list like 1,2,3)", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
