package sdk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/registry"
)

// A plugin's stand-in for a quantized (MLX-format) target reads the packed
// embedding with its scales and biases, as the host names them (role,
// role.scales, role.biases), and gives exactly the target's own token
// embeddings and raw logits.
func TestStandInTargetOfAQuantizedTarget(t *testing.T) {
	dir := fixtures.Dir(t, "qwen35-tiny-mlx-q4")
	mlxtest.Run(t, func(t *mlxtest.T) {
		ck, err := loader.OpenCheckpoint(dir)
		t.NoErr(err)
		defer ck.Close()
		var locs []TensorLocation
		for _, role := range []string{RoleEmbedding, RoleEmbedding + ScalesSuffix, RoleEmbedding + BiasesSuffix} {
			name := "language_model.model.embed_tokens" + strings.TrimPrefix(role, RoleEmbedding)
			if role == RoleEmbedding {
				name += ".weight"
			}
			ti, ok := ck.Tensor(name)
			if !ok {
				t.Fatalf("fixture lacks %s", name)
			}
			loc := TensorLocation{Name: name, Role: role, File: ti.Path, Offset: ti.Offset, Size: ti.Size, DType: ti.DType.String()}
			for _, d := range ti.Shape {
				loc.Shape = append(loc.Shape, int(d))
			}
			locs = append(locs, loc)
		}
		st, err := newStandInTarget(&LoadConfig{DType: mlx.Float32, Target: TargetInfo{HiddenSize: 64, VocabSize: 512, NumLayers: 4, Tensors: locs}})
		t.NoErr(err)
		defer st.free()
		if !st.embed.Table.Quantized() {
			t.Fatal("the stand-in's embedding is not quantized")
		}

		cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
		t.NoErr(err)
		v, _, err := registry.Default.Build("Qwen3_5ForCausalLM", registry.Config{Dir: dir, JSON: cfg, DType: mlx.Float32})
		t.NoErr(err)
		target := v.(*qwen35.Model)
		tensors, err := ck.Arrays()
		t.NoErr(err)
		t.NoErr(target.LoadWeights(tensors))
		defer target.Free()

		ids := mlx.FromInt32s([]int32{3, 511, 0, 42}, 1, 4)
		hidden := mlx.RandomNormal(mlx.RandomKey(1), mlx.Float32, 0, 1, 1, 4, 64)
		for _, c := range []struct {
			what      string
			got, want *mlx.Array
		}{
			{"TokenEmbeddings", st.TokenEmbeddings(ids), target.TokenEmbeddings(ids)},
			{"RawLogits", st.RawLogits(hidden), target.RawLogits(hidden)},
		} {
			d, err := mlx.Max(mlx.Abs(mlx.Subtract(c.got, c.want)), false).Item()
			t.NoErr(err)
			if d != 0 {
				t.Errorf("%s differs from the target's by %g", c.what, d)
			}
		}
	})
}
