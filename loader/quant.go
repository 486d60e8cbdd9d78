package loader

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/specula-dev/specula/internal/jsonerr"
	"github.com/specula-dev/specula/mlx"
)

// Quantization is the quantization section of an MLX-format checkpoint's
// config.json, as mlx_lm.convert -q (and mlx-vlm) write it
// (spec/quantized.md): default parameters, plus overrides keyed by module
// path ("language_model.model.layers.0.mlp.gate"). Whether a layer is
// quantized at all is decided by its tensors (a <path>.scales exists); the
// section only says how.
type Quantization struct {
	// Default applies to every quantized layer without an override.
	Default mlx.Quant
	// Modules holds the per-module overrides; a zero Quant marks a module
	// the converter left unquantized.
	Modules map[string]mlx.Quant
}

// For returns the parameters of the layer at module path (without
// ".weight"): its override, else the default.
func (q *Quantization) For(path string) mlx.Quant {
	if p, ok := q.Modules[path]; ok {
		return p
	}
	return q.Default
}

// Summary describes the section in one line: "affine 4-bit, group 64"
// followed by the number of overrides, if any.
func (q *Quantization) Summary() string {
	s := q.Default.String()
	if n := len(q.Modules); n > 0 {
		s += fmt.Sprintf(" (%d per-module overrides)", n)
	}
	return s
}

// ParseQuantization reads the quantization section of config.json (the
// document's bytes; file names it in errors). It returns nil and no error
// when the checkpoint declares none. The section is "quantization", or its
// copy "quantization_config" (mlx-lm writes both); a missing mode means
// affine and missing bits or group size take the mode's defaults, as mlx-lm
// does. A Hugging Face quantization_config with a quant_method (fp8, awq,
// gptq, bitsandbytes, ...) is refused: those formats are not MLX's.
func ParseQuantization(file string, config []byte) (*Quantization, error) {
	var top struct {
		Quantization       json.RawMessage `json:"quantization"`
		QuantizationConfig json.RawMessage `json:"quantization_config"`
		TextConfig         *struct {
			QuantizationConfig json.RawMessage `json:"quantization_config"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(config, &top); err != nil {
		return nil, fmt.Errorf("%s: %w", file, jsonerr.Explain(config, err))
	}
	section, key := top.Quantization, "quantization"
	if isAbsent(section) {
		section, key = top.QuantizationConfig, "quantization_config"
	}
	if isAbsent(section) && top.TextConfig != nil {
		section, key = top.TextConfig.QuantizationConfig, "text_config.quantization_config"
	}
	if isAbsent(section) {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(section, &fields); err != nil {
		return nil, fmt.Errorf("%s: %s must be an object: %w", file, key, err)
	}
	if method, ok := fields["quant_method"]; ok {
		var name string
		_ = json.Unmarshal(method, &name)
		return nil, fmt.Errorf("%s: %s.quant_method is %q: checkpoints quantized that way are not supported; specula reads MLX quantization (\"quantization\": {\"group_size\", \"bits\", \"mode\"}, as written by mlx_lm.convert -q or `specula quantize`): quantize the unquantized original instead", file, key, name)
	}

	def, err := parseQuant(fields, mlx.Quant{})
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", file, key, err)
	}
	q := &Quantization{Default: def, Modules: map[string]mlx.Quant{}}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if name == "group_size" || name == "bits" || name == "mode" {
			continue
		}
		raw := bytes.TrimSpace(fields[name])
		switch {
		case len(raw) > 0 && raw[0] == '{':
			var sub map[string]json.RawMessage
			if err := json.Unmarshal(raw, &sub); err != nil {
				return nil, fmt.Errorf("%s: %s[%q]: %w", file, key, name, err)
			}
			p, err := parseQuant(sub, def)
			if err != nil {
				return nil, fmt.Errorf("%s: %s[%q]: %w", file, key, name, err)
			}
			q.Modules[name] = p
		case string(raw) == "false":
			q.Modules[name] = mlx.Quant{}
		case string(raw) == "true":
			q.Modules[name] = def
		default:
			// Other writers add informational keys; mlx-lm ignores them too.
			slog.Debug("loader: ignoring a key of the quantization section", "file", file, "key", key+"."+name)
		}
	}
	return q, nil
}

// parseQuant reads group_size, bits and mode from one object. A missing
// mode is affine; missing bits or group size come from base when it has the
// same mode, else from the mode's defaults.
func parseQuant(fields map[string]json.RawMessage, base mlx.Quant) (mlx.Quant, error) {
	q := mlx.Quant{Mode: mlx.Affine}
	if raw, ok := fields["mode"]; ok {
		var m string
		if err := json.Unmarshal(raw, &m); err != nil {
			return q, fmt.Errorf("mode: want a string such as \"affine\": %w", err)
		}
		q.Mode = mlx.QuantMode(strings.ToLower(m))
	}
	def, err := mlx.DefaultQuant(q.Mode)
	if err != nil {
		return q, err
	}
	if base.Mode == q.Mode {
		def = base
	}
	for _, f := range []struct {
		name string
		dst  *int
		def  int
	}{{"bits", &q.Bits, def.Bits}, {"group_size", &q.GroupSize, def.GroupSize}} {
		raw, ok := fields[f.name]
		if !ok {
			*f.dst = f.def
			continue
		}
		if err := json.Unmarshal(raw, f.dst); err != nil {
			return q, fmt.Errorf("%s: want an integer: %w", f.name, err)
		}
	}
	if err := q.Validate(); err != nil {
		return q, err
	}
	return q, nil
}

func isAbsent(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}
