package dflash

import (
	"math"
	"strings"
	"testing"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/model"
)

// Unembed applies the output multiplier, then the soft-cap, to the target's
// raw logits (spec/dflash.md 5.3).
func TestUnembedScalesAndCaps(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		d := randomDraft(t, edit(t, func(top, dc map[string]any) {
			dc["output_multiplier"] = 0.5
			dc["final_logit_softcapping"] = 2
		}))
		h := mlx.RandomNormal(mlx.RandomKey(5), mlx.Float32, 0, 3, 1, 3, 64)
		raw := t.Float32s(d.target.RawLogits(h))
		got := t.Float32s(d.Unembed(h))
		for i, r := range raw {
			want := 2 * math.Tanh(0.5*float64(r)/2)
			if math.Abs(float64(got[i])-want) > 1e-5 {
				t.Fatalf("logit %d: %v from raw %v, want %v", i, got[i], r, want)
			}
		}
	})
}

// The block rows take the target's embeddings times input_embedding_scale.
func TestInputEmbeddingScale(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		plain := randomDraft(t, edit(t, nil))
		scaled := randomDraft(t, edit(t, func(top, dc map[string]any) { dc["input_embedding_scale"] = 2 }))
		// Same weights and target, so the difference is the scale alone:
		// doubling the embeddings of a block run without context equals
		// running the plain draft on a table scaled by 2.
		tgt := scaled.target.(*fakeTarget)
		ids := mlx.FromInt32s([]int32{1, 2, 3}, 1, 3)
		a, _ := scaled.Forward(&model.Batch{InputIDs: ids, SeqOffsets: []int{0}}, nil, scaled.NewCaches())
		tgt.table = mlx.MultiplyScalar(tgt.table, 2)
		plain.target = tgt
		b, _ := plain.Forward(&model.Batch{InputIDs: ids, SeqOffsets: []int{0}}, nil, plain.NewCaches())
		if d, err := mlx.Max(mlx.Abs(mlx.Subtract(a, b)), false).Item(); err != nil || d > 1e-5 {
			t.Errorf("scaled embeddings differ by %v (%v)", d, err)
		}
	})
}

// A forward whose first slot is not where the caches sit breaks the session
// protocol (stale block rows, or a gap) and panics before touching a cache.
func TestForwardRefusesAMisplacedWrite(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		d := randomDraft(t, edit(t, nil))
		caches := d.NewCaches()
		x := mlx.Zeros(mlx.Float32, 1, 4, 128)
		d.Forward(&model.Batch{SeqOffsets: []int{0}, Hidden: x}, nil, caches)
		block := mlx.FromInt32s([]int32{1, 510}, 1, 2)
		cache.Schedule(caches, 4, 1)                                                // as a proposal does
		d.Forward(&model.Batch{InputIDs: block, SeqOffsets: []int{4}}, nil, caches) // block at 4, 5; not rewound yet
		msg := panics(func() { d.Forward(&model.Batch{SeqOffsets: []int{4}, Hidden: x}, nil, caches) })
		if !strings.Contains(msg, "cache sits at offset 6 but this forward starts at slot 4") {
			t.Errorf("panic %q", msg)
		}
		cache.Commit(caches, 0, 1, 4)
		for _, c := range caches {
			if c.Offset() != 4 {
				t.Fatalf("a cache at %d after the rewind", c.Offset())
			}
		}
		if msg := panics(func() {
			d.Forward(&model.Batch{SeqOffsets: []int{4}, Hidden: mlx.Zeros(mlx.Float32, 1, 2, 64)}, nil, caches)
		}); !strings.Contains(msg, "want [1, C, 128]") {
			t.Errorf("features of the wrong width: panic %q", msg)
		}
		if msg := panics(func() { d.Forward(&model.Batch{InputIDs: block, SeqOffsets: []int{4}}, nil, caches[:1]) }); !strings.Contains(msg, "got 1 caches for 2 layers") {
			t.Errorf("too few caches: panic %q", msg)
		}
		if msg := panics(func() {
			d.Forward(&model.Batch{InputIDs: block, SeqOffsets: []int{4}, SeqQueryLens: []int{1}}, nil, caches)
		}); !strings.Contains(msg, "right padding") {
			t.Errorf("padding: panic %q", msg)
		}
		// A context-only call returns nothing.
		if h, aux := d.Forward(&model.Batch{SeqOffsets: []int{4}, Hidden: x}, nil, caches); h != nil || aux != nil {
			t.Error("a context-only call returned hidden states")
		}
	})
}

// Before LoadWeights, or without a target, the draft says what is missing.
func TestForwardNeedsWeightsAndTarget(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		cfg, err := ParseConfig(edit(t, nil))
		t.NoErr(err)
		d, err := NewFromConfig(cfg, mlx.Float32, nil)
		t.NoErr(err)
		if msg := panics(func() { d.Forward(&model.Batch{}, nil, d.NewCaches()) }); !strings.Contains(msg, "call LoadWeights first") {
			t.Errorf("panic %q", msg)
		}
		if msg := panics(func() { d.Unembed(mlx.Zeros(mlx.Float32, 1, 1, 64)) }); !strings.Contains(msg, "call AttachTarget first") {
			t.Errorf("panic %q", msg)
		}
		if _, err := NewFromConfig(cfg, mlx.Int32, nil); err == nil {
			t.Error("an integer compute dtype was accepted")
		}
	})
}

// panics runs fn and returns the message it panicked with ("" if none).
func panics(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				msg = e.Error()
			} else {
				msg = r.(string)
			}
		}
	}()
	fn()
	return ""
}
