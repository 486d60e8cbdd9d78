package loader

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/specula-dev/specula/mlx"
)

// MLXModel is a model's tensors in MLX's layout (spec/quantized.md), ready
// for WriteMLX: what an architecture's sanitize step turns a Hugging Face
// checkpoint into, before casting and quantization.
type MLXModel struct {
	// Tensors are named by module path ("language_model.model.layers.0.
	// mlp.up_proj.weight"), with every layout change applied.
	Tensors map[string]*mlx.Array
	// Linear lists the module paths (without ".weight") of the layers that
	// may be quantized: linear layers and embeddings. A layer is quantized
	// when its input dimension is a whole number of groups.
	Linear []string
	// KeepDType lists tensors that keep their stored dtype when the model
	// is cast (Qwen3.5's A_log).
	KeepDType []string
}

// MLXOptions says how WriteMLX casts and quantizes.
type MLXOptions struct {
	// DType casts every float tensor but KeepDType; 0 (Bool) means the
	// config's own dtype as mlx_lm.convert reads it (torch_dtype, else
	// text_config.dtype), and no cast when it names none.
	DType mlx.DType
	// Quant quantizes the Linear layers; the zero value writes an
	// unquantized MLX checkpoint.
	Quant mlx.Quant
}

// mlxShardBytes is mlx-lm's shard size (MAX_FILE_SIZE_GB = 5).
const mlxShardBytes = 5 << 30

// auxFiles are the files copied from the source checkpoint: the tokenizer,
// chat template and generation config, as mlx_lm.convert keeps them.
var auxFiles = []string{
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
	"vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json", "generation_config.json",
}

// WriteMLX writes m into the new folder dst as mlx_lm.convert (-q) does:
// float tensors cast per opts.DType, linear layers quantized with
// opts.Quant (weight, scales and biases under the layer's module path;
// layers whose input is not a whole number of groups stay dense, as
// mlx-lm leaves them), safetensors files with metadata format = mlx
// (shards of at most 5 GiB) and model.safetensors.index.json, config.json
// with the quantization and quantization_config sections (keys sorted,
// indented by 4), and the tokenizer files of src copied. It evaluates on the
// MLX worker. dst must not exist; the checkpoint is assembled in a sibling
// folder and renamed into place, so a failure never leaves a half-written
// dst.
func WriteMLX(dst string, src *Checkpoint, m *MLXModel, opts MLXOptions) error {
	if _, err := os.Stat(dst); err == nil {
		return fmt.Errorf("%s already exists: choose a new folder (nothing is overwritten)", dst)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if src.Config == nil {
		return fmt.Errorf("%s has no config.json", src.Dir)
	}
	if !opts.Quant.IsZero() {
		if err := opts.Quant.Validate(); err != nil {
			return err
		}
	}
	config, err := decodeObject(src.Config.Raw)
	if err != nil {
		return fmt.Errorf("%s: %w", src.Config.Path, err)
	}
	dtype := opts.DType
	if dtype == mlx.Bool {
		dtype = configDType(config)
	}

	tensors, nparams, err := prepareMLX(m, dtype, opts.Quant)
	if err != nil {
		return err
	}
	if !opts.Quant.IsZero() {
		q := map[string]any{"group_size": opts.Quant.GroupSize, "bits": opts.Quant.Bits, "mode": string(opts.Quant.Mode)}
		config["quantization"], config["quantization_config"] = q, q
	}
	// mlx_lm.convert's config: the generation config's eos_token_id
	// merged in, the source path and (for text models) vision config
	// dropped.
	if eos := generationEOS(src); eos != nil {
		config["eos_token_id"] = eos
	}
	delete(config, "_name_or_path")
	delete(config, "vision_config")

	parent := filepath.Dir(filepath.Clean(dst))
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dst)+".partial-")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	// MkdirTemp makes the folder private (0700); renamed to dst it gets
	// the mode mlx_lm.convert's folder has (os.MkdirAll(dst, 0o755)).
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err := writeMLXTensors(tmp, tensors, nparams); err != nil {
		return err
	}
	cfg, err := encodeConfig(config)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), cfg, 0o644); err != nil {
		return err
	}
	for _, name := range auxFiles {
		if err := copyIfExists(filepath.Join(src.Dir, name), filepath.Join(tmp, name)); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	done = true
	return nil
}

// prepareMLX casts and quantizes m's tensors and counts the parameters as
// mlx-lm does (a quantized layer counts its unpacked weight).
func prepareMLX(m *MLXModel, dtype mlx.DType, q mlx.Quant) (map[string]*mlx.Array, int64, error) {
	out := make(map[string]*mlx.Array, len(m.Tensors))
	keep := map[string]bool{}
	for _, n := range m.KeepDType {
		keep[n] = true
	}
	for name, a := range m.Tensors {
		if dtype != mlx.Bool && a.DType().IsFloat() && a.DType() != dtype && !keep[name] {
			a = mlx.AsType(a, dtype)
		}
		out[name] = a
	}
	quantized := map[string]bool{}
	if !q.IsZero() {
		for _, path := range m.Linear {
			wName := path + ".weight"
			w, ok := out[wName]
			if !ok {
				return nil, 0, fmt.Errorf("quantize: layer %s has no tensor %s", path, wName)
			}
			if w.NDim() < 2 || w.Dim(-1)%q.GroupSize != 0 {
				continue // mlx-lm leaves such layers dense
			}
			wq, s, b := mlx.Quantize(w, q)
			out[wName], out[path+".scales"] = wq, s
			if b != nil {
				out[path+".biases"] = b
			}
			quantized[path] = true
		}
	}
	nparams := countParameters(out, quantized, q)
	if err := mlx.Eval(slices.Collect(maps.Values(out))...); err != nil {
		return nil, 0, fmt.Errorf("quantize: %w", err)
	}
	return out, nparams, nil
}

// countParameters counts parameters as mlx-lm's index does: those of leaf
// modules only (a tensor held directly by a module that has sub-modules,
// like Qwen3.5's A_log beside the delta-net's projections, is not
// counted), a quantized layer by its unpacked weight (scales and biases
// not counted).
func countParameters(tensors map[string]*mlx.Array, quantized map[string]bool, q mlx.Quant) int64 {
	module := func(name string) string {
		if i := strings.LastIndexByte(name, '.'); i >= 0 {
			return name[:i]
		}
		return ""
	}
	parents := map[string]bool{}
	for name := range tensors {
		for m := module(module(name)); m != ""; m = module(m) {
			parents[m] = true
		}
	}
	var n int64
	for name, a := range tensors {
		mod := module(name)
		switch {
		case parents[mod]:
		case quantized[mod] && strings.HasSuffix(name, ".weight"):
			n += int64(a.Size()) * 32 / int64(q.Bits)
		case quantized[mod]:
		default:
			n += int64(a.Size())
		}
	}
	return n
}

// writeMLXTensors writes the safetensors files and the index into dir.
func writeMLXTensors(dir string, tensors map[string]*mlx.Array, nparams int64) error {
	names := slices.Sorted(maps.Keys(tensors))
	sizes := make([]int64, len(names))
	var total int64
	for i, n := range names {
		sizes[i] = tensors[n].NBytes()
		total += sizes[i]
	}
	runs := ShardRuns(sizes, mlxShardBytes)
	weightMap := map[string]string{}
	for i, run := range runs {
		file := ShardFileName(i, len(runs))
		shard := map[string]*mlx.Array{}
		for _, n := range names[run[0]:run[1]] {
			shard[n] = tensors[n]
			weightMap[n] = file
		}
		if err := mlx.SaveSafetensors(filepath.Join(dir, file), shard, map[string]string{"format": "mlx"}); err != nil {
			return fmt.Errorf("writing %s: %w", file, err)
		}
	}
	index := map[string]any{
		"metadata":   map[string]any{"total_size": total, "total_parameters": nparams},
		"weight_map": weightMap,
	}
	b, err := encodeConfig(index)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, IndexName), b, 0o644)
}

// decodeObject decodes a JSON object keeping numbers as written.
func decodeObject(raw []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("config is not a JSON object")
	}
	return m, nil
}

// encodeConfig writes v as mlx-lm writes JSON: indented by 4, keys sorted
// (Go sorts every level; mlx-lm only the top one), no HTML escaping.
func encodeConfig(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.SetIndent("", "    ")
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// configDType is the dtype mlx_lm.convert casts to: torch_dtype, else
// text_config.dtype, when it is float16, bfloat16 or float32; Bool (no cast)
// otherwise.
func configDType(config map[string]any) mlx.DType {
	name, _ := config["torch_dtype"].(string)
	if name == "" {
		if tc, ok := config["text_config"].(map[string]any); ok {
			name, _ = tc["dtype"].(string)
		}
	}
	switch name {
	case "float16", "bfloat16", "float32":
		d, _ := mlx.ParseDType(name)
		return d
	}
	return mlx.Bool
}

// generationEOS returns generation_config.json's eos_token_id, or nil.
func generationEOS(src *Checkpoint) any {
	if src.Files.GenerationConfig == "" {
		return nil
	}
	raw, err := os.ReadFile(src.Files.GenerationConfig)
	if err != nil {
		return nil
	}
	m, err := decodeObject(raw)
	if err != nil {
		return nil // mlx-lm ignores a malformed generation config too
	}
	eos, ok := m["eos_token_id"]
	if !ok || eos == nil || eos == false {
		return nil
	}
	return eos
}

func copyIfExists(from, to string) error {
	in, err := os.Open(from)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
