package qwen35test

import (
	"bytes"
	"slices"
	"strings"

	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// planShard is what CheckRankReadsItsPartsOnly needs of a target.
type planShard interface {
	PlanShard(rank, ranks int) error
	LoadWeights(map[string]*mlx.Array) error
	Weights() []*mlx.Array
	Free()
}

// Replicated reports whether a rank of a tensor-parallel Qwen3.5 (dense or
// MoE) keeps the whole stored tensor name (spec/distributed.md): the
// embedding, the head, every norm, the MoE router and the shared-expert
// gate. A rank cuts every other tensor.
func Replicated(name string) bool {
	return strings.Contains(name, "embed_tokens.") || strings.Contains(name, "lm_head.") ||
		strings.HasSuffix(name, "norm.weight") || strings.Contains(name, ".mlp.gate.") ||
		strings.Contains(name, ".mlp.shared_expert_gate.")
}

// CheckRankReadsItsPartsOnly builds the architecture config.json names from
// checkpoint folder dir (a model.safetensors), cuts it as rank of ranks (PlanShard, no group) and
// loads its weights from the checkpoint's lazy arrays, then checks that
//
//   - evaluating the rank's weights read no cut tensor whole: of the
//     checkpoint's arrays only the Replicated ones were evaluated (the
//     others were read in part, through loader.PartOf);
//   - the rank's weights equal, exactly, those of the same cut loaded from
//     arrays PartOf does not know (MLX's loader called directly), which
//     the binder cuts with ops after reading each tensor whole.
func CheckRankReadsItsPartsOnly(t *mlxtest.T, dir string, rank, ranks int) {
	t.Helper()
	ck, err := loader.OpenCheckpoint(dir)
	t.NoErr(err)
	defer ck.Close()
	load := func(tensors map[string]*mlx.Array) planShard {
		m := Build(t, ck.Config.Architecture, dir).(planShard)
		t.NoErr(m.PlanShard(rank, ranks))
		t.NoErr(m.LoadWeights(tensors))
		t.Eval(m.Weights()...)
		return m
	}
	whole, err := ck.Arrays()
	t.NoErr(err)
	parts := load(whole)
	defer parts.Free()
	read := 0
	for name, a := range whole {
		switch {
		case a.Evaluated() && !Replicated(name):
			t.Errorf("%s rank %d of %d: tensor %s %v was read whole; the rank keeps a part of it", dir, rank, ranks, name, a.Shape())
		case a.Evaluated():
			read++
		}
	}
	if read == 0 {
		t.Errorf("%s rank %d of %d: not even the replicated tensors were read (the check sees nothing)", dir, rank, ranks)
	}

	cut := load(fixtures.Arrays(t, dir, loader.SingleFileName))
	defer cut.Free()
	got, want := parts.Weights(), cut.Weights()
	if len(got) != len(want) {
		t.Fatalf("%s rank %d of %d: %d weights read in parts, %d cut from whole tensors", dir, rank, ranks, len(got), len(want))
	}
	for i := range got {
		g, err := got[i].Bytes()
		t.NoErr(err)
		w, err := want[i].Bytes()
		t.NoErr(err)
		if !slices.Equal(got[i].Shape(), want[i].Shape()) || got[i].DType() != want[i].DType() || !bytes.Equal(g, w) {
			t.Errorf("%s rank %d of %d: weight %d (%v %s) differs from the cut of the whole tensor (%v %s)", dir, rank, ranks, i, got[i].Shape(), got[i].DType(), want[i].Shape(), want[i].DType())
		}
	}
}
