package qwen35_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

// tinyFixture is testdata/fixtures/qwen35-tiny: a random 4-layer Qwen3.5
// (3 delta-net layers, then attention) with transformers' outputs.
type tinyFixture struct {
	dir    string
	config []byte
	ref    reference
}

// reference is the part of reference.json the tests read.
type reference struct {
	PromptIDs        []int32 `json:"prompt_ids"`
	GreedyIDs        []int32 `json:"greedy_ids"`
	ScriptedSpecLoop struct {
		BlockSize         int     `json:"block_size"`
		EmittedIDs        []int32 `json:"emitted_ids"`
		AcceptanceLengths []int   `json:"acceptance_lengths"`
		Rounds            []struct {
			Start      int     `json:"start"`
			VerifySize int     `json:"verify_size"`
			BlockIDs   []int32 `json:"block_ids"`
			Accepted   int     `json:"accepted_drafts"`
			Bonus      int32   `json:"bonus"`
		} `json:"rounds"`
		RowOffsets []int `json:"verify_logits_row_offsets"`
	} `json:"scripted_spec_loop"`
}

func loadTiny(t testing.TB) *tinyFixture {
	t.Helper()
	dir := fixtures.Dir(t, "qwen35-tiny")
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := &tinyFixture{dir: dir, config: cfg}
	if err := json.Unmarshal(raw, &f.ref); err != nil {
		t.Fatalf("reference.json: %v", err)
	}
	return f
}

// tensors loads the checkpoint's tensors (lazy).
func (f *tinyFixture) tensors(t *mlxtest.T) map[string]*mlx.Array {
	return fixtures.Arrays(t, f.dir, "model.safetensors")
}

// refTensor returns one tensor of reference.safetensors as float32.
func (f *tinyFixture) refTensor(t *mlxtest.T, name string) *mlx.Array {
	return fixtures.Reference(t, f.dir, name)
}

// model builds the fixture's model in float32 through the registry, as a
// program would, with tensors (the checkpoint's when nil).
func (f *tinyFixture) model(t *mlxtest.T, tensors map[string]*mlx.Array) *qwen35.Model {
	t.Helper()
	v, _, err := registry.Default.Build("Qwen3_5ForCausalLM", registry.Config{Dir: f.dir, JSON: f.config, DType: mlx.Float32})
	t.NoErr(err)
	m := v.(*qwen35.Model)
	if tensors == nil {
		tensors = f.tensors(t)
	}
	t.NoErr(m.LoadWeights(tensors))
	return m
}

// step runs one forward of ids at the caches' offset and returns the logits
// [1, L, V] and aux.
func step(m *qwen35.Model, caches []cache.Cache, ids []int32) (logits, aux *mlx.Array) {
	b := &model.Batch{
		InputIDs:     mlx.FromInt32s(ids, 1, len(ids)),
		SeqOffsets:   []int{caches[0].Offset()},
		SeqQueryLens: []int{len(ids)},
	}
	h, aux := m.Forward(b, caches)
	return m.Unembed(h), aux
}

// maxAbs is max |a − b| (shapes must broadcast).
func maxAbs(t *mlxtest.T, a, b *mlx.Array) float64 {
	t.Helper()
	v, err := mlx.Max(mlx.Abs(mlx.Subtract(a, b)), false).Item()
	t.NoErr(err)
	return float64(v)
}

// relErr is max |a − b| / max |b|: the error relative to the magnitude of
// the reference.
func relErr(t *mlxtest.T, a, ref *mlx.Array) float64 {
	t.Helper()
	m, err := mlx.Max(mlx.Abs(ref), false).Item()
	t.NoErr(err)
	return maxAbs(t, a, ref) / float64(m)
}

// argmax returns the argmax of the last row of logits [1, L, V].
func argmaxLast(t *mlxtest.T, logits *mlx.Array) int32 {
	t.Helper()
	L := logits.Dim(1)
	return t.Int32s(mlx.Argmax(mlx.SliceAxis(logits, 1, L-1, L), -1, false))[0]
}

// argmaxRows returns the argmax of every row of logits [1, L, V].
func argmaxRows(t *mlxtest.T, logits *mlx.Array) []int32 {
	t.Helper()
	return t.Int32s(mlx.Argmax(logits, -1, false))
}

func freeCaches(caches []cache.Cache) {
	for _, c := range caches {
		c.Free()
	}
}

// rows returns rows [i, j) of a [1, L, X] array as [1, j−i, X].
func rows(a *mlx.Array, i, j int) *mlx.Array { return mlx.SliceAxis(a, 1, i, j) }

// batch is a forward of ids at slot offset.
func batch(ids []int32, offset int) *model.Batch {
	return &model.Batch{InputIDs: mlx.FromInt32s(ids, 1, len(ids)), SeqOffsets: []int{offset}}
}
