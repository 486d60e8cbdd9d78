package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/loader"
)

// `specula quantize` on the tiny Qwen3.5 fixture writes the tensors that
// mlx_lm.convert wrote from the same source (testdata/fixtures/
// qwen35-tiny-mlx*, see its README), byte for byte: MLX's quantize is
// deterministic on the CPU. Config and index agree as JSON documents; the
// two known differences are the source's model_type (mlx-lm's run used
// "qwen3_5", which it knows, for the fixture's "qwen3_5_text") and mlx-lm
// renaming rope_parameters.rope_type to "type" while loading.
func TestQuantizeMatchesMLXLMConvert(t *testing.T) {
	src := fixtures.Dir(t, "qwen35-tiny")
	for _, c := range []struct {
		fixture string
		args    []string
	}{
		{"qwen35-tiny-mlx-q4", nil},
		{"qwen35-tiny-mlx-q8", []string{"--bits", "8", "--group-size", "32"}},
		{"qwen35-tiny-mlx-mxfp4", []string{"--mode", "mxfp4"}},
		{"qwen35-tiny-mlx-nvfp4", []string{"--mode", "nvfp4"}},
		{"qwen35-tiny-mlx-mxfp8", []string{"--mode", "mxfp8"}},
		{"qwen35-tiny-mlx-q3-g32", []string{"--bits", "3", "--group-size", "32"}},
		{"qwen35-tiny-mlx-q6", []string{"--bits", "6"}},
		{"qwen35-tiny-mlx-q2-g128", []string{"--bits", "2", "--group-size", "128"}},
		{"qwen35-tiny-mlx-q4-bf16", []string{"--dtype", "bfloat16"}},
		{"qwen35-tiny-mlx", []string{"--mode", "none"}},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			want := fixtures.Dir(t, c.fixture)
			dst := filepath.Join(t.TempDir(), "out")
			args := append([]string{"quantize", src, dst}, c.args...)
			stdout, stderr, code := execSpecula(t, args...)
			if code != 0 || !strings.Contains(stdout, "wrote "+dst) {
				t.Fatalf("specula %v: exit %d\n%s%s", args, code, stdout, stderr)
			}
			sameTensors(t, dst, want)
			sameJSON(t, filepath.Join(dst, "config.json"), filepath.Join(want, "config.json"))
			sameJSON(t, filepath.Join(dst, loader.IndexName), filepath.Join(want, loader.IndexName))
		})
	}
}

// sameTensors fails unless the checkpoints in got and want hold the same
// tensor names with equal dtypes, shapes and bytes, and both files carry
// format = mlx.
func sameTensors(t *testing.T, got, want string) {
	t.Helper()
	open := func(dir string) *loader.File {
		f, err := loader.Open(filepath.Join(dir, loader.SingleFileName))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if f.Metadata()["format"] != "mlx" {
			t.Fatalf("%s: metadata %v, want format = mlx", dir, f.Metadata())
		}
		return f
	}
	g, w := open(got), open(want)
	names := func(f *loader.File) []string {
		var out []string
		for _, ti := range f.Tensors() {
			out = append(out, ti.Name)
		}
		slices.Sort(out)
		return out
	}
	if gn, wn := names(g), names(w); !slices.Equal(gn, wn) {
		t.Fatalf("tensor names differ:\nspecula %v\nmlx-lm  %v", gn, wn)
	}
	for _, wt := range w.Tensors() {
		gt, _ := g.Tensor(wt.Name)
		if gt.DType != wt.DType || !slices.Equal(gt.Shape, wt.Shape) {
			t.Fatalf("%s: specula wrote %s%v, mlx-lm %s%v", wt.Name, gt.DType, gt.Shape, wt.DType, wt.Shape)
		}
		gb, err := g.Bytes(wt.Name)
		if err != nil {
			t.Fatal(err)
		}
		wb, err := w.Bytes(wt.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(gb, wb) {
			t.Fatalf("%s: bytes differ from mlx-lm's", wt.Name)
		}
	}
}

// sameJSON compares two JSON documents, ignoring model_type and the
// rope_type / type spelling (see TestQuantizeMatchesMLXLMConvert).
func sameJSON(t *testing.T, got, want string) {
	t.Helper()
	read := func(p string) map[string]any {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		delete(m, "model_type")
		if rp, ok := m["rope_parameters"].(map[string]any); ok {
			if v, ok := rp["type"]; ok {
				rp["rope_type"] = v
				delete(rp, "type")
			}
		}
		return m
	}
	g, w := read(got), read(want)
	if !reflect.DeepEqual(g, w) {
		gb, _ := json.MarshalIndent(g, "", " ")
		wb, _ := json.MarshalIndent(w, "", " ")
		t.Fatalf("%s differs from mlx-lm's:\nspecula %s\nmlx-lm  %s", filepath.Base(got), gb, wb)
	}
}

func TestQuantizeErrors(t *testing.T) {
	src := fixtures.Dir(t, "qwen35-tiny")
	exists := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no folders", []string{"quantize"}, 2, "want SRC and DST folders"},
		{"bad bits", []string{"quantize", src, "x", "--bits", "7"}, 2, "MLX supports 1, 2, 3, 4, 5, 6 or 8"},
		{"bad mode", []string{"quantize", src, "x", "--mode", "int4"}, 2, `unknown quantization mode "int4"`},
		{"mode and group", []string{"quantize", src, "x", "--mode", "mxfp4", "--group-size", "64"}, 2, "mxfp4 needs 4 bits and group size 32"},
		{"bits without a mode", []string{"quantize", src, "x", "--mode", "none", "--bits", "4"}, 2, "need a quantization --mode"},
		{"bad dtype", []string{"quantize", src, "x", "--dtype", "int8"}, 2, "want float16, bfloat16 or float32"},
		{"destination exists", []string{"quantize", src, exists}, 1, "already exists"},
		{"already quantized", []string{"quantize", fixtures.Dir(t, "qwen35-tiny-mlx-q4"), filepath.Join(t.TempDir(), "o")}, 1, "already quantized"},
		{"already MLX", []string{"quantize", fixtures.Dir(t, "qwen35-tiny-mlx"), filepath.Join(t.TempDir(), "o")}, 1, "already in MLX's layout"},
		{"not a checkpoint", []string{"quantize", t.TempDir(), filepath.Join(t.TempDir(), "o")}, 1, "model.safetensors"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := execSpecula(t, c.args...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr, c.code, c.want)
			}
		})
	}
}

// Drafts quantized by `specula quantize` (DFlash, DFlash2: every projection,
// the selector's hidden projection) draft for a quantized target, and
// speculative greedy output equals plain greedy output on that target,
// token for token.
func TestQuantizedDraftsOnQuantizedTargetAreExact(t *testing.T) {
	target := fixtures.Dir(t, "qwen35-tiny-mlx-q4")
	for _, draft := range []string{"dflash-tiny", "dflash2-tiny"} {
		t.Run(draft, func(t *testing.T) {
			qdraft := filepath.Join(t.TempDir(), draft+"-q8")
			if _, stderr, code := execSpecula(t, "quantize", fixtures.Dir(t, draft), qdraft, "--bits", "8", "--group-size", "32"); code != 0 {
				t.Fatalf("quantize %s: exit %d\n%s", draft, code, stderr)
			}
			speculativeEqualsPlain(t, target, qdraft, draft == "dflash2-tiny")
		})
	}
}

// The fixture drafts as trained (unquantized) draft for each mlx_lm.convert
// conversion of their target (the MLX layout unquantized, affine 4- and
// 8-bit, mxfp4), and speculative greedy output equals plain greedy output on
// that target, token for token.
func TestFixtureDraftsOnMLXTargetsAreExact(t *testing.T) {
	for _, target := range []string{"qwen35-tiny-mlx", "qwen35-tiny-mlx-q4", "qwen35-tiny-mlx-q8", "qwen35-tiny-mlx-mxfp4"} {
		for _, draft := range []string{"dflash-tiny", "dflash2-tiny"} {
			t.Run(target+"/"+draft, func(t *testing.T) {
				speculativeEqualsPlain(t, fixtures.Dir(t, target), fixtures.Dir(t, draft), draft == "dflash2-tiny")
			})
		}
	}
}

// speculativeEqualsPlain runs 32 greedy tokens of the fixture prompt on
// target with draft and with --no-draft and fails unless the ids are equal
// and the draft proposed tokens.
func speculativeEqualsPlain(t *testing.T, target, draft string, selector bool) {
	t.Helper()
	prompt, _ := fixturePrompt(t)
	caps := `["draft", "block-draft"]`
	if selector {
		caps = `["draft", "block-draft", "selector"]`
	}
	manifest := filepath.Join(t.TempDir(), "m.toml")
	text := "schema = 1\nname = \"q\"\n[target]\npath = " + strconvQuote(target) +
		"\ncapabilities = [\"model\", \"draft-target\"]\ndtype = \"float32\"\n[draft]\npath = " + strconvQuote(draft) +
		"\ncapabilities = " + caps + "\n[sampling]\ntemperature = 0.0\nmax_tokens = 32\n"
	if err := os.WriteFile(manifest, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var results [2]struct {
		IDs   []int32 `json:"ids"`
		Stats struct {
			Drafted int `json:"drafted"`
		} `json:"stats"`
	}
	for i, extra := range [][]string{nil, {"--no-draft"}} {
		args := append([]string{"run", "-m", manifest, "--ids", joinIDs(prompt), "--json"}, extra...)
		execSpeculaJSON(t, &results[i], args...)
	}
	if !slices.Equal(results[0].IDs, results[1].IDs) || len(results[0].IDs) != 32 || results[0].Stats.Drafted == 0 {
		t.Fatalf("with the draft %v (drafted %d)\nwithout %v", results[0].IDs, results[0].Stats.Drafted, results[1].IDs)
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// inspect and check show the layout and how each group of layers is stored.
func TestInspectAndCheckShowQuantization(t *testing.T) {
	dir := fixtures.Dir(t, "qwen35-tiny-mlx-q2-g128")
	stdout, stderr, code := execSpecula(t, "inspect", dir)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"layout: MLX (format = mlx); quantization: affine 2-bit, group 128",
		"language_model.model.layers.*.mlp.down_proj (4): affine 2-bit, group 128",
		"language_model.model.layers.*.mlp.gate_proj (4): dense F32",
		"language_model.model.embed_tokens (1): dense F32",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, stdout)
		}
	}
	manifest := filepath.Join(t.TempDir(), "m.toml")
	text := "schema = 1\nname = \"q\"\n[target]\npath = " + strconvQuote(fixtures.Dir(t, "qwen35-tiny-mlx-mxfp4")) + "\ncapabilities = [\"model\", \"draft-target\"]\ndtype = \"float32\"\n"
	if err := os.WriteFile(manifest, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = execSpecula(t, "check", manifest)
	if want := "layout        MLX (format = mlx); quantization mxfp4 4-bit, group 32; layers: 32 mxfp4 4-bit, group 32"; code != 0 || !strings.Contains(stdout, want) {
		t.Fatalf("check: exit %d, output lacks %q:\n%s%s", code, want, stdout, stderr)
	}
}
