package synth

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
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

// A mixture-of-experts target: every layer's MLP is the sparse block with
// fused experts, and the config names the MoE architecture and sizes.
func TestWritesMoECheckpoint(t *testing.T) {
	dir := t.TempDir()
	q := tinyTarget()
	q.Experts, q.TopK, q.ExpertSize, q.SharedSize = 4, 2, 16, 24
	if err := q.Write(dir); err != nil {
		t.Fatal(err)
	}
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	// Per layer the 3 dense MLP tensors become 7: router, fused experts
	// (2), shared expert (3), shared-expert gate.
	if got, want := len(ck.Tensors()), 3*18+15+2; got != want {
		t.Fatalf("%d tensors, want %d", got, want)
	}
	if ck.Config == nil || ck.Config.Architecture != "Qwen3_5MoeForCausalLM" {
		t.Fatalf("config %+v", ck.Config)
	}
	info, _ := ck.Tensor("model.layers.2.mlp.experts.gate_up_proj")
	if got := fmt.Sprint(info.Shape); got != "[4 32 32]" {
		t.Fatalf("fused experts %s, want [E, 2·Ie, H] = [4 32 32]", got)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"num_experts": 4`, `"num_experts_per_tok": 2`, `"moe_intermediate_size": 16`, `"shared_expert_intermediate_size": 24`, `"model_type": "qwen3_5_moe_text"`} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config.json lacks %s", want)
		}
	}
	if strings.Contains(string(cfg), "intermediate_size\": 64") {
		t.Errorf("an MoE config.json carries the dense intermediate_size")
	}
	// A token reads 2 of the 4 experts of each layer: half the expert
	// weights, 4 layers × 2 experts × 3·16·32.
	if d := q.Params() - q.ActiveParams(); d != 4*2*3*16*32 {
		t.Errorf("Params − ActiveParams = %d, want the unread experts %d", d, 4*2*3*16*32)
	}
}

// The released sizes' totals and per-token counts agree with their names.
func TestMoEShapesMatchTheirNames(t *testing.T) {
	for _, c := range []struct {
		size          string
		total, active float64 // billions, as named
	}{{"35B-A3B", 35, 3}, {"122B-A10B", 122, 10}, {"397B-A17B", 397, 17}} {
		q, err := Qwen35Shape(c.size, 0)
		if err != nil {
			t.Fatal(err)
		}
		total, active := float64(q.Params())/1e9, float64(q.ActiveParams())/1e9
		if math.Abs(total-c.total)/c.total > 0.02 || math.Abs(active-c.active)/c.active > 0.12 {
			t.Errorf("%s: %.2fB parameters, %.2fB active", c.size, total, active)
		}
	}
}
