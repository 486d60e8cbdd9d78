package qwen35_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

func TestLayerTaps(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		m := tiny(t, f, nil)
		for _, bad := range [][]int{{4}, {-1}, {1, 1}, {2, 1}} {
			if err := m.SetLayerTaps(bad); err == nil {
				t.Errorf("SetLayerTaps(%v) succeeded", bad)
			}
		}
		t.NoErr(m.SetLayerTaps([]int{1, 3}))
		caches := m.NewCaches()
		defer freeCaches(caches)
		_, aux := step(m, caches, f.Ref.PromptIDs[:5])
		t.Shape(aux, 1, 5, 2*m.Info().HiddenSize)
		perLayer := mlx.SliceAxis(f.RefTensor(t, "hidden_per_layer"), 1, 0, 5)
		// Layer 1's tap is its output; the last layer's (3) is transformers'
		// hidden_states[4], recorded after the final norm.
		wants := []*mlx.Array{mlx.SliceAxis(perLayer, 0, 1, 2), mlx.SliceAxis(f.RefTensor(t, "final_hidden"), 0, 0, 5)}
		for i, layer := range []int{1, 3} {
			got := mlx.SliceAxis(aux, 2, i*64, (i+1)*64)
			if r := relErr(t, got, wants[i]); r > hiddenTol {
				t.Errorf("tap %d (layer %d): relative error %.3g", i, layer, r)
			}
		}
		if n := m.NumLayers(); n != 4 {
			t.Errorf("NumLayers %d", n)
		}
	})
}

func TestForwardRejectsMisuse(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		m := tiny(t, f, nil)
		caches := m.NewCaches()
		defer freeCaches(caches)
		ids := mlx.FromInt32s([]int32{1, 2, 3}, 1, 3)
		cases := map[string]struct {
			b      *model.Batch
			caches []cache.Cache
		}{
			"right padding is not supported":                  {&model.Batch{InputIDs: ids, SeqQueryLens: []int{2}}, caches},
			"but the caches sit at offset 0":                  {&model.Batch{InputIDs: ids, SeqOffsets: []int{5}}, caches},
			"caches for 4 layers":                             {&model.Batch{InputIDs: ids}, caches[:2]},
			"layer 3 (full_attention) got a *cache.Recurrent": {&model.Batch{InputIDs: ids}, []cache.Cache{caches[0], caches[1], caches[2], caches[0]}},
		}
		for want, c := range cases {
			mustPanic(t, want, func() { m.Forward(c.b, c.caches) })
		}
		// A rejected forward leaves the caches untouched.
		for i, c := range caches {
			if c.Offset() != 0 {
				t.Errorf("cache %d moved to %d by a rejected forward", i, c.Offset())
			}
		}
		empty, err := qwen35.NewFromConfig(m.Config(), mlx.Float32)
		t.NoErr(err)
		mustPanic(t, "call LoadWeights first", func() { empty.Forward(&model.Batch{InputIDs: ids}, caches) })
	})
}

func TestRegistration(t *testing.T) {
	f := loadTiny(t)
	for _, name := range []string{"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"} {
		e, err := registry.Default.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if caps := e.Capabilities.String(); caps != "model, draft-target" {
			t.Errorf("%s: capabilities %q, want model and draft-target", name, caps)
		}
	}
	if _, _, err := registry.Default.Build("Qwen3_5ForCausalLM", registry.Config{JSON: f.Config, DType: mlx.Int32}); err == nil ||
		!strings.Contains(err.Error(), "compute dtype int32") {
		t.Errorf("an int32 compute dtype gave %v", err)
	}
}

// mustPanic runs fn and fails unless it panics with a message containing
// want.
func mustPanic(t testing.TB, want string, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("no panic, want one mentioning %q", want)
		} else if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Errorf("panic %q, want one mentioning %q", msg, want)
		}
	}()
	fn()
}

// TestCPUScanEqualsGraphScan: on the CPU the delta-net runs its recurrence
// as one node (mlx.GatedDeltaScan); with SPECULA_GDN_KERNEL=0 it runs the
// graph scan, the exact baseline. A prompt forward, then a verification-
// style forward of 6 tokens with a rollback point at every position and a
// commit that keeps 3 of them (the delta-net restores a per-token state),
// then one more step: logits and every cache state agree within the
// tolerances of the other path comparisons.
func TestCPUScanEqualsGraphScan(t *testing.T) {
	f := loadTiny(t)
	mlxtest.Run(t, func(t *mlxtest.T) {
		if mlx.CurrentDevice() != mlx.CPU {
			t.Skip("the one-node scan serves the CPU stream")
		}
		// The node census reads the verification's whole graph pending.
		defer qwen35.SetEarlySubmit(false)()
		m := tiny(t, f, nil)
		p := f.Ref.PromptIDs
		const prefix, k, keep = 9, 6, 3
		// run returns the logits, the caches and the number of scan nodes
		// in the verification forward's graph.
		run := func() (*mlx.Array, []cache.Cache, int) {
			caches := m.NewCaches()
			a, _ := step(m, caches, p[:prefix])
			state := []*mlx.Array{a}
			for _, c := range caches {
				state = append(state, c.State()...)
			}
			t.Eval(state...)
			cache.Schedule(caches, prefix, k)
			b, _ := step(m, caches, p[prefix:prefix+k])
			ops, err := mlx.GraphOps(b)
			t.NoErr(err)
			cache.Commit(caches, keep, k, prefix)
			c, _ := step(m, caches, p[prefix+keep:prefix+keep+1])
			logits := mlx.Concatenate(1, a, b, c)
			t.Eval(logits)
			mlx.Pin(logits)
			return logits, caches, ops["GatedDeltaScan"]
		}
		kernel, kernelCaches, kernelNodes := run()
		t.Setenv("SPECULA_GDN_KERNEL", "0")
		graph, graphCaches, graphNodes := run()
		defer func() {
			mlx.Unpin(kernel, graph)
			freeCaches(kernelCaches)
			freeCaches(graphCaches)
		}()
		if kernelNodes != 3 || graphNodes != 0 {
			t.Fatalf("scan nodes in the verification graph: %d by default and %d with SPECULA_GDN_KERNEL=0, want 3 (one per delta-net layer) and 0", kernelNodes, graphNodes)
		}
		qwen35test.Within(t, "logits, max abs difference", maxAbs(t, kernel, graph), pathLogitTol)
		qwen35test.CompareStates(t, "one-node scan vs graph scan", kernelCaches, graphCaches)
	})
}
