package synth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/loader"
)

// wideTarget is tinyTarget with an embedding table of 3.2 chunks
// (33000 × 100 values), so that it is drawn in pieces by several workers
// and ends in a partial chunk; bfloat16, as the benchmarks write.
func wideTarget() Qwen35 {
	q := tinyTarget()
	q.Vocab, q.Hidden, q.DType = 33000, 100, BFloat16
	return q
}

func tinyDraft() DFlash {
	return DFlash{Hidden: 32, Vocab: 300, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 16, Intermediate: 64,
		BlockSize: 8, MaskToken: 299, TargetLayerIDs: []int{0, 2}, TargetLayers: 4, SlidingWindow: 64,
		RopeTheta: 1e7, DFlash2: true, ConvKernel: 2, ConvGroup: 16, SelectorRank: 4, SelectorTopK: 4, DType: BFloat16, Seed: 4}
}

// weights returns the model.safetensors that w writes into a new folder.
func weights(t *testing.T, w func(dir string) error) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := w(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, loader.SingleFileName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// values reads tensor name of the checkpoint in dir as float64s.
func values(t *testing.T, dir, name string) []float64 {
	t.Helper()
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	info, ok := ck.Tensor(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	b, err := ck.Bytes(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	switch info.DType {
	case loader.BF16:
		for i := 0; i < len(b); i += 2 {
			out = append(out, float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[i:]))<<16)))
		}
	case loader.F32:
		for i := 0; i < len(b); i += 4 {
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))))
		}
	default:
		t.Fatalf("%s is %s", name, info.DType)
	}
	return out
}

// The bytes depend on the options alone: one worker and four write the same
// files.
func TestSameBytesWhateverTheWorkers(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	q, d := wideTarget(), tinyDraft()
	var target, draft [2][]byte
	for i, procs := range []int{1, 4} {
		runtime.GOMAXPROCS(procs)
		target[i], draft[i] = weights(t, q.Write), weights(t, d.Write)
	}
	if !bytes.Equal(target[0], target[1]) || !bytes.Equal(draft[0], draft[1]) {
		t.Fatal("GOMAXPROCS 1 and 4 wrote different weights")
	}
}

func TestSeedsGiveDifferentWeights(t *testing.T) {
	a := tinyTarget()
	b := a
	b.Seed++
	if bytes.Equal(weights(t, a.Write), weights(t, b.Write)) {
		t.Fatal("seeds 3 and 4 wrote the same weights")
	}
}

// Every tensor has the shape spec/qwen35.md section 10.2 gives it and the
// dtype of the checkpoint, but A_log and the gated norm, which Qwen3.5
// stores in float32.
func TestTensorsHaveTheSpecifiedShapesAndDTypes(t *testing.T) {
	q := tinyTarget() // H 32, V 300, I 64, D 16, Hq 2, Hkv 1, Hk 2 × Dk 8, Hv 4 × Dv 8, Kc 4
	q.DType = BFloat16
	dir := t.TempDir()
	if err := q.Write(dir); err != nil {
		t.Fatal(err)
	}
	const convDim = 2*2*8 + 4*8
	want := map[string][]uint64{
		"model.embed_tokens.weight": {300, 32},
		"model.norm.weight":         {32},
	}
	for i := range 4 {
		p := fmt.Sprintf("model.layers.%d.", i)
		layer := map[string][]uint64{
			"input_layernorm.weight": {32}, "post_attention_layernorm.weight": {32},
			"mlp.gate_proj.weight": {64, 32}, "mlp.up_proj.weight": {64, 32}, "mlp.down_proj.weight": {32, 64},
		}
		if i == 3 { // FullAttentionInterval 4
			for k, v := range map[string][]uint64{
				"self_attn.q_proj.weight": {2 * 2 * 16, 32}, "self_attn.k_proj.weight": {16, 32}, "self_attn.v_proj.weight": {16, 32},
				"self_attn.o_proj.weight": {32, 2 * 16}, "self_attn.q_norm.weight": {16}, "self_attn.k_norm.weight": {16},
			} {
				layer[k] = v
			}
		} else {
			for k, v := range map[string][]uint64{
				"linear_attn.in_proj_qkv.weight": {convDim, 32}, "linear_attn.in_proj_z.weight": {32, 32},
				"linear_attn.in_proj_b.weight": {4, 32}, "linear_attn.in_proj_a.weight": {4, 32},
				"linear_attn.conv1d.weight": {convDim, 1, 4}, "linear_attn.dt_bias": {4}, "linear_attn.A_log": {4},
				"linear_attn.norm.weight": {8}, "linear_attn.out_proj.weight": {32, 32},
			} {
				layer[k] = v
			}
		}
		for k, v := range layer {
			want[p+k] = v
		}
	}
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if got := len(ck.Tensors()); got != len(want) {
		t.Errorf("%d tensors, want %d", got, len(want))
	}
	for name, shape := range want {
		info, ok := ck.Tensor(name)
		if !ok {
			t.Errorf("no %s", name)
			continue
		}
		dtype := loader.BF16
		if strings.HasSuffix(name, "A_log") || strings.HasSuffix(name, "linear_attn.norm.weight") {
			dtype = loader.F32
		}
		if !slices.Equal(info.Shape, shape) || info.DType != dtype {
			t.Errorf("%s: %s %v, want %s %v", name, info.DType, info.Shape, dtype, shape)
		}
	}
}

// Large tensors have the sample mean and standard deviation of their
// distributions, within 5 standard errors: σ/√n for the mean, about
// σ/√(2n) for the standard deviation of a normal sample.
func TestTensorsFollowTheirDistributions(t *testing.T) {
	q := wideTarget()
	dir := t.TempDir()
	if err := q.Write(dir); err != nil {
		t.Fatal(err)
	}
	d := tinyDraft()
	d.Hidden, d.Layers = 4096, 1 // base kernels [2, 2, 4096]
	d.Heads, d.Intermediate, d.SelectorRank = 1, 4, 1
	draftDir := t.TempDir()
	if err := d.Write(draftDir); err != nil {
		t.Fatal(err)
	}
	check := func(what string, v []float64, mean, std float64) {
		t.Helper()
		n := float64(len(v))
		var m, s float64
		for _, x := range v {
			m += x
		}
		m /= n
		for _, x := range v {
			s += (x - m) * (x - m)
		}
		s = math.Sqrt(s / (n - 1))
		if math.Abs(m-mean) > 5*std/math.Sqrt(n) || math.Abs(s-std) > 5*std/math.Sqrt(2*n) {
			t.Errorf("%s: %d values of mean %.5f, std %.5f; want N(%g, %g²)", what, len(v), m, s, mean, std)
		}
	}
	// normal(0, 0.1) over 3.3 M values in four chunks, stored bfloat16.
	embed := values(t, dir, "model.embed_tokens.weight")
	check("embed_tokens", embed, 0, 0.1)
	// proj(I, 1.2): std 1.2/√I.
	check("down_proj", values(t, dir, "model.layers.0.mlp.down_proj.weight"), 0, 1.2/math.Sqrt(64))
	// baseKernel: the [2, Kc, H] kernels' tap 0 near 1 (std 0.2), others near 0 (std 0.3).
	bk := values(t, draftDir, "layers.0.mlp_conv.base_kernel")
	var tap0, others []float64
	for i, x := range bk {
		if (i/4096)%2 == 0 {
			tap0 = append(tap0, x)
		} else {
			others = append(others, x)
		}
	}
	check("base_kernel tap 0", tap0, 1, 0.2)
	check("base_kernel other taps", others, 0, 0.3)

	// Each chunk has its own generator: no chunk repeats another.
	c0, c1 := embed[:1000], embed[chunkValues:chunkValues+1000]
	if slices.Equal(c0, c1) {
		t.Error("chunks 0 and 1 of the embedding table hold the same values")
	}
}

// The values are those the package comment documents: value j of chunk c
// of tensor n is the draw of the PCG seeded from SHA-256(seed ‖ c ‖ n).
func TestValuesFollowTheDocumentedDerivation(t *testing.T) {
	q := wideTarget()
	q.DType = Float32
	dir := t.TempDir()
	if err := q.Write(dir); err != nil {
		t.Fatal(err)
	}
	const name = "model.embed_tokens.weight"
	got := values(t, dir, name)
	for _, c := range []uint64{0, 3} {
		var b []byte
		b = binary.LittleEndian.AppendUint64(b, q.Seed)
		b = binary.LittleEndian.AppendUint64(b, c)
		sum := sha256.Sum256(append(b, name...))
		r := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
		for j := range 100 {
			want := float64(float32(0.1 * r.NormFloat64())) // normal(0, 0.1)
			if v := got[int(c)*(1<<20)+j]; v != want {
				t.Fatalf("chunk %d value %d = %g, want %g", c, j, v, want)
			}
		}
	}
}

// A write cancelled halfway leaves neither the weights nor a temporary
// file, and returns the context's error; sharded, the shards already
// complete are removed too.
func TestCancelledWriteLeavesNothing(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharded=%v", sharded), func(t *testing.T) {
			if sharded {
				defer func(b int64) { shardBytes = b }(shardBytes)
				shardBytes = 1 << 20 // the embedding table alone, then the rest
			}
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			q := wideTarget()
			// The embedding table comes first in either layout: cancel
			// just after it.
			embed := int64(q.Vocab * q.Hidden * 2)
			q.Progress = func(written, total int64) {
				if written <= embed || ctx.Err() != nil {
					return
				}
				if first, _ := filepath.Glob(filepath.Join(dir, "model-00001-of-*.safetensors")); sharded && len(first) != 1 {
					t.Errorf("cancelling with the first shard not written: %v", first)
				}
				cancel()
			}
			if err := q.WriteContext(ctx, dir); !errors.Is(err, context.Canceled) {
				t.Fatalf("WriteContext = %v, want context.Canceled", err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Fatalf("a cancelled write left %v", names)
			}
		})
	}
}

// Weights over shardBytes are split as huggingface_hub splits them, with an
// index the loader opens; every tensor holds the bytes of a single-file
// write, and no shard but one of a lone large tensor exceeds the limit.
func TestLargeCheckpointsAreSharded(t *testing.T) {
	q := wideTarget()
	single := t.TempDir()
	if err := q.Write(single); err != nil {
		t.Fatal(err)
	}
	defer func(b int64) { shardBytes = b }(shardBytes)
	shardBytes = 100_000 // the 6.6 MB embedding table alone, then the layers in a few shards
	dir := t.TempDir()
	if err := q.Write(dir); err != nil {
		t.Fatal(err)
	}
	x, err := loader.ReadIndex(filepath.Join(dir, loader.IndexName))
	if err != nil {
		t.Fatal(err)
	}
	shards := x.Shards()
	if len(shards) < 3 || shards[0] != fmt.Sprintf("model-00001-of-%05d.safetensors", len(shards)) {
		t.Fatalf("shards %v", shards)
	}
	if _, err := os.Stat(filepath.Join(dir, loader.SingleFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a sharded checkpoint also has %s", loader.SingleFileName)
	}
	a, err := loader.OpenCheckpoint(single)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := loader.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var total int64
	for _, info := range a.Tensors() {
		x, _ := a.Bytes(info.Name)
		y, err := b.Bytes(info.Name)
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs in the sharded checkpoint (%v)", info.Name, err)
		}
		total += info.Size
	}
	if x.TotalSize != uint64(total) {
		t.Errorf("index total_size %d, want %d", x.TotalSize, total)
	}
	for _, f := range b.Shards() {
		var size int64
		for _, t := range f.Tensors() {
			size += t.Size
		}
		if size > shardBytes && len(f.Tensors()) > 1 {
			t.Errorf("%s holds %d bytes of tensors, over %d", f.Path(), size, shardBytes)
		}
	}
}
