package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/loader"
)

func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = dispatch(&env{stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

// checkpointTensors reads the tensor list a fixture documents in its
// reference.json, independently of package loader.
func checkpointTensors(t *testing.T, dir string) map[string][]uint64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Checkpoint struct {
			Tensors map[string][]uint64 `json:"checkpoint_tensors"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil || len(ref.Checkpoint.Tensors) == 0 {
		t.Fatalf("reference.json: %v", err)
	}
	return ref.Checkpoint.Tensors
}

func TestInspectFixtureFolder(t *testing.T) {
	dir := fixtures.Dir(t, "qwen35-tiny")
	want := checkpointTensors(t, dir)
	code, out, errOut := runCmd("inspect", dir)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, s := range []string{
		"kind: checkpoint folder, single model.safetensors",
		"architecture: Qwen3_5ForCausalLM (model_type qwen3_5_text)",
		"generation and tokenizer files: -",
		"metadata: format=pt",
		"model.embed_tokens.weight",
		"[512, 64]",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	lines := strings.Split(out, "\n")
	var rows int
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 {
			if _, ok := want[f[0]]; ok {
				rows++
			}
		}
	}
	if rows != len(want) {
		t.Errorf("%d tensor rows, reference.json lists %d", rows, len(want))
	}
	if !strings.Contains(out, "F32") || !strings.Contains(out, "total") {
		t.Errorf("no dtype totals:\n%s", out)
	}
}

func TestInspectJSONOnFixtureFile(t *testing.T) {
	dir := fixtures.Dir(t, "dflash2-tiny")
	want := checkpointTensors(t, dir)
	code, out, errOut := runCmd("inspect", filepath.Join(dir, "model.safetensors"), "--json")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var r inspectReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if !r.OK || r.Kind != "file" || len(r.Tensors) != len(want) || len(r.Shards) != 1 || r.Shards[0].Metadata["format"] != "pt" {
		t.Fatalf("report %+v", r)
	}
	var sum int64
	for _, tt := range r.Tensors {
		shape, ok := want[tt.Name]
		if !ok || tt.DType != "F32" || shapeString(tt.Shape) != shapeString(shape) {
			t.Errorf("tensor %+v, reference.json says %v", tt, shape)
		}
		sum += tt.Bytes
	}
	if len(r.Totals) != 1 || r.Totals[0].DType != "F32" || r.Totals[0].Count != len(want) || r.Total.Bytes != sum {
		t.Errorf("totals %+v, total %+v (tensor bytes %d)", r.Totals, r.Total, sum)
	}
}

func TestInspectShardedIndex(t *testing.T) {
	dir := t.TempDir()
	w := func(name string, tensors ...loader.Tensor) {
		if err := loader.WriteFile(filepath.Join(dir, name), tensors, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	w("model-00001-of-00002.safetensors", loader.Tensor{Name: "a", DType: loader.BF16, Shape: []uint64{2}, Data: make([]byte, 4)})
	w("model-00002-of-00002.safetensors", loader.Tensor{Name: "b", DType: loader.F32, Shape: []uint64{}, Data: make([]byte, 4)})
	index := `{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`
	if err := os.WriteFile(filepath.Join(dir, loader.IndexName), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte("{}"), 0o644)

	code, out, errOut := runCmd("inspect", "--json", filepath.Join(dir, loader.IndexName))
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	var r inspectReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Kind != "checkpoint" || r.Index != loader.IndexName || len(r.Shards) != 2 || r.Config != nil ||
		r.Files["tokenizer"] != "tokenizer.json" || len(r.Totals) != 2 || r.Tensors[1].File != "model-00002-of-00002.safetensors" {
		t.Fatalf("report %s", out)
	}

	code, out, _ = runCmd("inspect", dir)
	if code != exitOK || !strings.Contains(out, "2 shards listed by model.safetensors.index.json") ||
		!strings.Contains(out, "architecture: - (no config.json)") || !strings.Contains(out, "FILE") {
		t.Fatalf("exit %d, text output:\n%s", code, out)
	}
}

func TestInspectMalformedFileFails(t *testing.T) {
	header := `{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`
	for len(header)%8 != 0 {
		header += " "
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(append(b, header...), make([]byte, 10)...) // 6 bytes short
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"inspect", p}, {"inspect", "--json", p}} {
		code, out, errOut := runCmd(args...)
		if code != exitFailure {
			t.Errorf("%v: exit %d", args, code)
		}
		// Text: nothing on stdout. JSON: the verdict, as check gives it.
		if args[1] != "--json" && out != "" {
			t.Errorf("%v: stdout %q", args, out)
		}
		if args[1] == "--json" {
			var v struct {
				Path  string `json:"path"`
				OK    *bool  `json:"ok"`
				Error string `json:"error"`
			}
			if err := json.Unmarshal([]byte(out), &v); err != nil || v.OK == nil || *v.OK || v.Path != p || !strings.Contains(v.Error, "rule 12") {
				t.Errorf("%v: stdout %q (%v); want {\"path\", \"ok\": false, \"error\"}", args, out, err)
			}
		}
		line := strings.TrimSuffix(errOut, "\n")
		if strings.Contains(line, "\n") || !strings.HasPrefix(line, "specula inspect: "+p+": ") ||
			!strings.Contains(line, "truncated") || !strings.Contains(line, "rule 12") {
			t.Errorf("%v: stderr %q, want one line naming the file and rule 12", args, errOut)
		}
	}
}

func TestInspectFailureNamesTheTensor(t *testing.T) {
	header := `{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(append(b, header...), make([]byte, 8)...)
	p := filepath.Join(t.TempDir(), "x.safetensors")
	os.WriteFile(p, b, 0o644)
	code, _, errOut := runCmd("inspect", p)
	if code != exitFailure || !strings.Contains(errOut, `tensor "w"`) || !strings.Contains(errOut, "rule 11") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestInspectUsage(t *testing.T) {
	if code, _, errOut := runCmd("inspect"); code != exitUsage || !strings.Contains(errOut, "want exactly one PATH") {
		t.Errorf("no PATH: exit %d, stderr %q", code, errOut)
	}
	if code, out, _ := runCmd("inspect", "--help"); code != exitOK || !strings.Contains(out, "Usage: specula inspect") {
		t.Errorf("--help: exit %d, stdout %q", code, out)
	}
	if code, _, errOut := runCmd("inspect", filepath.Join(t.TempDir(), "absent")); code != exitFailure || !strings.Contains(errOut, "no such file") {
		t.Errorf("absent path: exit %d, stderr %q", code, errOut)
	}
}
