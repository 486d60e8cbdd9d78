package qwen35moe_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/arch/qwen35moe"
	"github.com/specula-dev/specula/internal/synth"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/registry"
)

// writeCheckpoint saves tensors with the fixture's config.json as a
// checkpoint folder, so that the loader (and PartOf) reads it.
func writeCheckpoint(t *mlxtest.T, f *qwen35test.Fixture, tensors map[string]*mlx.Array) string {
	dir := t.TempDir()
	t.NoErr(mlx.SaveSafetensors(filepath.Join(dir, loader.SingleFileName), tensors, map[string]string{"format": "pt"}))
	t.NoErr(os.WriteFile(filepath.Join(dir, "config.json"), f.Config, 0o644))
	return dir
}

// A rank of a sharded MoE model reads only its parts of the experts and of
// the shared expert, in each checkpoint layout of the experts: the fused
// tensors of the fixture, one tensor per expert (whose whole stack a rank
// never reads), and MLX's switch_mlp. The parts equal the cut of the whole
// tensors (qwen35test.CheckRankReadsItsPartsOnly).
func TestShardedLoadReadsOnlyTheRanksParts(t *testing.T) {
	f := qwen35test.Load(t, "qwen35moe-tiny")
	mlxtest.Run(t, func(t *mlxtest.T) {
		layouts := []struct {
			name string
			dir  string
		}{
			{"fused", f.Dir},
			{"per expert", writeCheckpoint(t, f, relayout(t, f, perExpert))},
			{"switch_mlp", writeCheckpoint(t, f, relayout(t, f, switchMLP))},
		}
		for _, l := range layouts {
			for _, r := range [][2]int{{0, 2}, {1, 2}, {3, 4}} {
				t.Logf("%s: rank %d of %d", l.name, r[0], r[1])
				qwen35test.CheckRankReadsItsPartsOnly(t, l.dir, r[0], r[1])
			}
		}
	})
}

// The routed experts quantized (MLX's switch_mlp, affine 4-bit in groups
// of 32) are cut consistently: a rank's rows of the gate and up weights
// with their scales and biases, and whole groups of the down projection's
// columns, each read in part. The checkpoint is a random MoE whose expert
// width (64) gives each of 2 ranks one whole group of every row.
func TestShardedLoadQuantizedExperts(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	q := synth.Qwen35{Vocab: 256, Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 32,
		LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyDim: 16, LinearValueDim: 16, ConvKernel: 4,
		FullAttentionInterval: 2, RopeTheta: 1e7, PartialRotary: 0.25, DType: synth.Float32, Seed: 3,
		Experts: 4, TopK: 2, ExpertSize: 64, SharedSize: 64}
	if err := q.Write(src); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	quant := mlx.Quant{Mode: mlx.Affine, Bits: 4, GroupSize: 32}
	cfg["quantization"] = map[string]any{"group_size": quant.GroupSize, "bits": quant.Bits, "mode": "affine"}
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	mlxtest.Run(t, func(t *mlxtest.T) {
		ts, err := mlx.LoadSafetensors(filepath.Join(src, loader.SingleFileName))
		t.NoErr(err)
		for i := range q.Layers {
			p := fmt.Sprintf("model.layers.%d.mlp.", i)
			gu, down := ts[p+"experts.gate_up_proj"], ts[p+"experts.down_proj"]
			delete(ts, p+"experts.gate_up_proj")
			delete(ts, p+"experts.down_proj")
			for name, w := range map[string]*mlx.Array{
				"gate_proj": mlx.SliceAxis(gu, 1, 0, q.ExpertSize),
				"up_proj":   mlx.SliceAxis(gu, 1, q.ExpertSize, 2*q.ExpertSize),
				"down_proj": down,
			} {
				wq, scales, biases := mlx.Quantize(w, quant)
				ts[p+"switch_mlp."+name+".weight"], ts[p+"switch_mlp."+name+".scales"], ts[p+"switch_mlp."+name+".biases"] = wq, scales, biases
			}
		}
		dir := t.TempDir()
		t.NoErr(mlx.SaveSafetensors(filepath.Join(dir, loader.SingleFileName), ts, map[string]string{"format": "mlx"}))
		t.NoErr(os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
		for _, rank := range []int{0, 1} {
			qwen35test.CheckRankReadsItsPartsOnly(t, dir, rank, 2)
		}
	})
}

// A rank count that does not divide the experts' or the shared expert's
// intermediate width is refused when the shard is planned (no group
// needed), naming the config.json field, its value and the rank count;
// the fixture's own widths (32 and 64) split over 4 ranks.
func TestPlanShardRefusesExpertWidths(t *testing.T) {
	f := qwen35test.Load(t, "qwen35moe-tiny")
	var base map[string]any
	if err := json.Unmarshal(f.Config, &base); err != nil {
		t.Fatal(err)
	}
	plan := func(edit func(map[string]any), rank, ranks int) error {
		m := maps.Clone(base)
		edit(m)
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := registry.Default.Build(f.Arch, registry.Config{Dir: f.Dir, JSON: raw, DType: mlx.Float32})
		if err != nil {
			t.Fatal(err)
		}
		return v.(*qwen35moe.Model).PlanShard(rank, ranks)
	}
	for _, c := range []struct {
		name  string
		edit  func(map[string]any)
		ranks int
		want  string
	}{
		{"expert width", func(m map[string]any) { m["moe_intermediate_size"] = 34 }, 4, "config.json moe_intermediate_size = 34 is not divisible by 4 ranks"},
		{"odd expert width", func(m map[string]any) { m["moe_intermediate_size"] = 33 }, 2, "config.json moe_intermediate_size = 33 is not divisible by 2 ranks"},
		{"shared expert width", func(m map[string]any) { m["shared_expert_intermediate_size"] = 66 }, 4, "config.json shared_expert_intermediate_size = 66 is not divisible by 4 ranks"},
	} {
		if err := plan(c.edit, 0, c.ranks); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if err := plan(func(map[string]any) {}, 3, 4); err != nil {
		t.Errorf("the fixture over 4 ranks: %v", err)
	}
}
