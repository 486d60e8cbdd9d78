package synth

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/specula-dev/specula/loader"
)

func tinyTarget() Qwen35 {
	return Qwen35{Vocab: 300, Hidden: 32, Intermediate: 64, Layers: 4, Heads: 2, KVHeads: 1, HeadDim: 16,
		LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyDim: 8, LinearValueDim: 8, ConvKernel: 4,
		FullAttentionInterval: 4, RopeTheta: 1e7, PartialRotary: 0.25, TieEmbeddings: true, DType: Float32, Seed: 3}
}

func TestWritesValidCheckpoints(t *testing.T) {
	dir := t.TempDir()
	q := tinyTarget()
	if err := q.Write(filepath.Join(dir, "target")); err != nil {
		t.Fatal(err)
	}
	ck, err := loader.OpenCheckpoint(filepath.Join(dir, "target"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	// 3 linear-attention layers (9 + 2 norms + 3 MLP = 14 tensors), one
	// attention layer (6 + 2 + 3 = 11), embedding and final norm.
	if got, want := len(ck.Tensors()), 3*14+11+2; got != want {
		t.Fatalf("%d tensors, want %d", got, want)
	}
	if ck.Config == nil || ck.Config.Architecture != "Qwen3_5ForCausalLM" {
		t.Fatalf("config %+v", ck.Config)
	}
	info, _ := ck.Tensor("model.layers.0.linear_attn.A_log")
	if info.DType.String() != "F32" {
		t.Fatalf("A_log stored as %s, want F32", info.DType)
	}

	d := DFlash{Hidden: 32, Vocab: 300, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 16, Intermediate: 64,
		BlockSize: 8, MaskToken: 299, TargetLayerIDs: []int{0, 2}, TargetLayers: 4, SlidingWindow: 64,
		RopeTheta: 1e7, DFlash2: true, ConvKernel: 2, ConvGroup: 16, SelectorRank: 4, SelectorTopK: 4, DType: BFloat16, Seed: 4}
	if err := d.Write(filepath.Join(dir, "draft")); err != nil {
		t.Fatal(err)
	}
	dk, err := loader.OpenCheckpoint(filepath.Join(dir, "draft"))
	if err != nil {
		t.Fatal(err)
	}
	defer dk.Close()
	// dflash2.md section 4: 3 + 15·N + 3 tensors.
	if got, want := len(dk.Tensors()), 3+15*2+3; got != want {
		t.Fatalf("%d draft tensors, want %d", got, want)
	}
}

func TestDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	q := tinyTarget()
	if err := q.Write(a); err != nil {
		t.Fatal(err)
	}
	if err := q.Write(b); err != nil {
		t.Fatal(err)
	}
	x, _ := os.ReadFile(filepath.Join(a, "model.safetensors"))
	y, _ := os.ReadFile(filepath.Join(b, "model.safetensors"))
	if !bytes.Equal(x, y) {
		t.Fatalf("the same options wrote different weights")
	}
}

func TestBFloat16Rounding(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{1.00390625, 0x3f80}, // halfway between 0x3f80 and 0x3f81: to even
		{1.01171875, 0x3f82}, // halfway between 0x3f81 and 0x3f82: to even
		{3.14159265, 0x4049},
	} {
		if got := bf16(c.in); got != c.want {
			t.Errorf("bf16(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

func TestReleasedShapes(t *testing.T) {
	q, err := Qwen35Shape("4B", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Qwen3.5-4B's text model is about 4.2e9 parameters with the tied head.
	if p := q.Params(); p < 3.9e9 || p > 4.6e9 {
		t.Fatalf("4B shape holds %d parameters", p)
	}
	if _, err := Qwen35Shape("5B", 0); err == nil {
		t.Fatalf("an unknown size was accepted")
	}
}
