package qwen35moe_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/arch/qwen35moe"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/registry"
)

// promptLogitsOff runs the fixture's prompt through the model built from
// tensors and returns its largest logit error against the reference.
func promptLogitsOff(t *mlxtest.T, f *qwen35test.Fixture, tensors map[string]*mlx.Array) float64 {
	t.Helper()
	m := f.Target(t, tensors)
	defer m.(*qwen35moe.Model).Free()
	caches := m.NewCaches()
	defer qwen35test.FreeCaches(caches)
	logits, _ := qwen35test.Step(m, caches, f.Ref.PromptIDs)
	return qwen35test.MaxAbs(t, logits, f.RefTensor(t, "logits"))
}

// relayout rewrites the fused experts of every layer (mlp.experts.
// gate_up_proj [E, 2·Ie, H], mlp.experts.down_proj [E, H, Ie]) with split.
func relayout(t *mlxtest.T, f *qwen35test.Fixture, split func(ts map[string]*mlx.Array, p string, gate, up, down *mlx.Array)) map[string]*mlx.Array {
	ts := maps.Clone(f.Tensors(t))
	for i := 0; ; i++ {
		p := fmt.Sprintf("model.layers.%d.mlp.", i)
		gu, ok := ts[p+"experts.gate_up_proj"]
		if !ok {
			if i == 0 {
				t.Fatalf("%s has no fused experts", f.Name)
			}
			return ts
		}
		half := gu.Dim(1) / 2
		split(ts, p, mlx.SliceAxis(gu, 1, 0, half), mlx.SliceAxis(gu, 1, half, 2*half), ts[p+"experts.down_proj"])
		delete(ts, p+"experts.gate_up_proj")
		delete(ts, p+"experts.down_proj")
	}
}

// perExpert is relayout's split into one tensor per expert and projection
// (mlp.experts.{e}.{gate,up,down}_proj.weight).
func perExpert(ts map[string]*mlx.Array, p string, gate, up, down *mlx.Array) {
	for e := range gate.Dim(0) {
		q := fmt.Sprintf("%sexperts.%d.", p, e)
		ts[q+"gate_proj.weight"] = mlx.Squeeze(mlx.SliceAxis(gate, 0, e, e+1), 0)
		ts[q+"up_proj.weight"] = mlx.Squeeze(mlx.SliceAxis(up, 0, e, e+1), 0)
		ts[q+"down_proj.weight"] = mlx.Squeeze(mlx.SliceAxis(down, 0, e, e+1), 0)
	}
}

// switchMLP is relayout's split into MLX's stacked mlp.switch_mlp layers.
func switchMLP(ts map[string]*mlx.Array, p string, gate, up, down *mlx.Array) {
	ts[p+"switch_mlp.gate_proj.weight"] = gate
	ts[p+"switch_mlp.up_proj.weight"] = up
	ts[p+"switch_mlp.down_proj.weight"] = down
}

// The three expert layouts load to the same model: the fused tensors of
// the fixture, the same weights as per-expert tensors, and as MLX's stacked
// switch_mlp (unquantized), each reproducing transformers' prompt logits.
func TestExpertLayouts(t *testing.T) {
	f := qwen35test.Load(t, "qwen35moe-tiny")
	mlxtest.Run(t, func(t *mlxtest.T) {
		layouts := map[string]map[string]*mlx.Array{
			"fused":      f.Tensors(t),
			"per expert": relayout(t, f, perExpert),
			"switch_mlp": relayout(t, f, switchMLP),
		}
		for name, ts := range layouts {
			qwen35test.Within(t, name+": prompt logits, max abs error", promptLogitsOff(t, f, ts), qwen35test.LogitTol)
		}
	})
}

// Broken expert tensors are reported with the tensor's name, what was found
// and what was expected; nothing loads.
func TestExpertErrors(t *testing.T) {
	f := qwen35test.Load(t, "qwen35moe-tiny")
	mlxtest.Run(t, func(t *mlxtest.T) {
		p := "model.layers.1.mlp."
		for _, c := range []struct {
			name string
			edit func(ts map[string]*mlx.Array)
			want []string
		}{
			{"missing experts", func(ts map[string]*mlx.Array) {
				delete(ts, p+"experts.gate_up_proj")
			}, []string{"1 missing: " + p + "experts.gate_up_proj"}},
			{"experts of another width", func(ts map[string]*mlx.Array) {
				ts[p+"experts.down_proj"] = mlx.Zeros(mlx.Float32, 8, 64, 16)
			}, []string{p + "experts.down_proj is [8 64 16], want [8 64 32] (experts: num_experts × hidden_size × moe_intermediate_size)"}},
			{"a per-expert tensor missing", func(ts map[string]*mlx.Array) {
				gu, down := ts[p+"experts.gate_up_proj"], ts[p+"experts.down_proj"]
				delete(ts, p+"experts.gate_up_proj")
				delete(ts, p+"experts.down_proj")
				for e := range 8 {
					q := fmt.Sprintf("%sexperts.%d.", p, e)
					ts[q+"gate_proj.weight"] = mlx.Squeeze(mlx.SliceAxis(mlx.SliceAxis(gu, 1, 0, 32), 0, e, e+1), 0)
					if e != 5 {
						ts[q+"up_proj.weight"] = mlx.Squeeze(mlx.SliceAxis(mlx.SliceAxis(gu, 1, 32, 64), 0, e, e+1), 0)
					}
					ts[q+"down_proj.weight"] = mlx.Squeeze(mlx.SliceAxis(down, 0, e, e+1), 0)
				}
			}, []string{"1 missing: " + p + "experts.5.up_proj.weight"}},
			{"router of another size", func(ts map[string]*mlx.Array) {
				ts[p+"gate.weight"] = mlx.Zeros(mlx.Float32, 6, 64)
			}, []string{p + "gate.weight is [6 64], want [8 64] (router: num_experts × hidden_size)"}},
			{"no shared expert", func(ts map[string]*mlx.Array) {
				delete(ts, p+"shared_expert.down_proj.weight")
				delete(ts, p+"shared_expert_gate.weight")
			}, []string{p + "shared_expert.down_proj.weight", p + "shared_expert_gate.weight"}},
			{"a stray tensor", func(ts map[string]*mlx.Array) {
				ts[p+"experts.bias"] = mlx.Zeros(mlx.Float32, 8)
			}, []string{"1 unexpected: " + p + "experts.bias"}},
		} {
			ts := maps.Clone(f.Tensors(t))
			c.edit(ts)
			v, _, err := registry.Default.Build(f.Arch, registry.Config{Dir: f.Dir, JSON: f.Config, DType: mlx.Float32})
			t.NoErr(err)
			err = v.(*qwen35moe.Model).LoadWeights(ts)
			var we *qwen35.WeightsError
			if !errors.As(err, &we) {
				t.Fatalf("%s: LoadWeights = %v, want a *qwen35.WeightsError", c.name, err)
			}
			t.Logf("%s: %v", c.name, err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error\n%v\nlacks %q", c.name, err, w)
				}
			}
		}
	})
}

func TestRegistration(t *testing.T) {
	f := qwen35test.Load(t, "qwen35moe-tiny")
	for _, name := range []string{"Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"} {
		e, err := registry.Default.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if caps := e.Capabilities.String(); caps != "model, draft-target" {
			t.Errorf("%s: capabilities %q, want model and draft-target (as the dense target)", name, caps)
		}
	}
	// The dense names refuse an MoE config and name the right architecture.
	for _, name := range []string{"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"} {
		_, _, err := registry.Default.Build(name, registry.Config{Dir: f.Dir, JSON: f.Config, DType: mlx.Float32})
		if !errors.Is(err, qwen35.ErrMoE) {
			t.Errorf("%s on the MoE fixture: %v, want qwen35.ErrMoE", name, err)
		}
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		m := f.Target(t, nil).(*qwen35moe.Model)
		defer m.Free()
		if c := m.Config(); c.NumExperts != 8 || c.TopK != 2 || c.ExpertSize != 32 || c.SharedSize != 64 || !c.NormTopK || c.NumLayers != 4 {
			t.Errorf("config %+v", c)
		}
		if _, err := m.ExportMLX(f.Tensors(t)); err == nil || !strings.Contains(err.Error(), "mlx_lm.convert") {
			t.Errorf("ExportMLX = %v, want a refusal naming mlx_lm.convert", err)
		}
	})
}

func TestParseConfig(t *testing.T) {
	f := qwen35test.Load(t, "qwen35moe-tiny")
	var base map[string]any
	if err := json.Unmarshal(f.Config, &base); err != nil {
		t.Fatal(err)
	}
	parse := func(edit func(map[string]any)) error {
		m := maps.Clone(base)
		edit(m)
		raw, _ := json.Marshal(m)
		_, err := qwen35moe.ParseConfig(raw)
		return err
	}
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"no experts", func(m map[string]any) { delete(m, "num_experts") }, `"num_experts" is required for a Qwen3.5 MoE model`},
		{"top-k over experts", func(m map[string]any) { m["num_experts_per_tok"] = 9 }, `"num_experts_per_tok" is 9, more than num_experts = 8`},
		{"zero width", func(m map[string]any) { m["moe_intermediate_size"] = 0 }, `"moe_intermediate_size" is 0`},
		{"no shared width", func(m map[string]any) { delete(m, "shared_expert_intermediate_size") }, `"shared_expert_intermediate_size" is required`},
		{"dense layers between", func(m map[string]any) { m["decoder_sparse_step"] = 2 }, `"decoder_sparse_step" is 2`},
		{"mlp-only layers", func(m map[string]any) { m["mlp_only_layers"] = []int{0} }, `"mlp_only_layers" is [0]`},
		{"hybrid and sparse problems together", func(m map[string]any) { delete(m, "hidden_size"); m["num_experts"] = -1 },
			`"hidden_size" is required; "num_experts" is -1`},
		{"nested fields named with their prefix", func(m map[string]any) {
			text := maps.Clone(m)
			delete(text, "num_experts_per_tok")
			clear(m)
			m["architectures"] = []string{"Qwen3_5MoeForConditionalGeneration"}
			m["model_type"] = "qwen3_5_moe"
			m["text_config"] = text
		}, `"text_config.num_experts_per_tok" is required`},
	} {
		if err := parse(c.edit); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if err := parse(func(m map[string]any) { m["norm_topk_prob"] = false; delete(m, "intermediate_size") }); err != nil {
		t.Errorf("norm_topk_prob false, no intermediate_size: %v", err)
	}
}

// On the CPU, MLX runs dense gather_mm in float32 only: a bfloat16 model
// with dense experts fails at load with a message saying what to use,
// while quantized experts (gather_qmm) load in bfloat16.
func TestCPUExpertsNeedFloat32(t *testing.T) {
	f := qwen35test.Load(t, "qwen35moe-tiny")
	q4 := fixtures.Dir(t, "qwen35moe-tiny-mlx-q4-g32")
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			t.Skip("a limit of MLX's CPU backend")
		}
		v, _, err := registry.Default.Build(f.Arch, registry.Config{Dir: f.Dir, JSON: f.Config, DType: mlx.BFloat16})
		t.NoErr(err)
		err = v.(*qwen35moe.Model).LoadWeights(f.Tensors(t))
		if err == nil || !strings.Contains(err.Error(), "expert products (gather_mm) with bfloat16 operands are not supported") || !strings.Contains(err.Error(), `dtype = "float32"`) {
			t.Fatalf("LoadWeights in bfloat16 = %v; want the gather_mm limit and the fix", err)
		}
		t.Log(err)

		raw, err := os.ReadFile(filepath.Join(q4, "config.json"))
		t.NoErr(err)
		v, _, err = registry.Default.Build(f.Arch, registry.Config{Dir: q4, JSON: raw, DType: mlx.BFloat16})
		t.NoErr(err)
		m := v.(*qwen35moe.Model)
		t.NoErr(m.LoadWeights(fixtures.Arrays(t, q4, "model.safetensors")))
		m.Free()
	})
}
