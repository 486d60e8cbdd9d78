package loader

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
)

// The reference fixtures were written by transformers / safetensors 0.8.0.
// Everything these tests expect comes from the fixtures' own README.md and
// reference.json, never from our reader.

// fixtureDoc is what a fixture folder documents about its files.
type fixtureDoc struct {
	dir       string
	count     int                 // README: "`model.safetensors` | N float32 tensors, ..."
	fileBytes map[string]int64    // README: "<file> | ..., B bytes"
	tensors   map[string][]uint64 // reference.json checkpoint.checkpoint_tensors
	renamed   map[string]string   // reference.json checkpoint.renamed_on_save
	ref       map[string]json.RawMessage
}

var (
	readmeModel = regexp.MustCompile("(?m)^\\| `model\\.safetensors` \\| (\\d+) float32 tensors,")
	readmeFile  = regexp.MustCompile("(?m)^\\| `([a-z.]+\\.safetensors)` \\| .*?(\\d+) bytes \\|$")
)

func readFixture(t *testing.T, name string) fixtureDoc {
	t.Helper()
	d := fixtureDoc{dir: fixtures.Dir(t, name), fileBytes: map[string]int64{}}
	readme, err := os.ReadFile(filepath.Join(d.dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := readmeModel.FindSubmatch(readme)
	if m == nil {
		t.Fatalf("%s/README.md does not state the model.safetensors tensor count", name)
	}
	d.count, _ = strconv.Atoi(string(m[1]))
	for _, m := range readmeFile.FindAllSubmatch(readme, -1) {
		d.fileBytes[string(m[1])], _ = strconv.ParseInt(string(m[2]), 10, 64)
	}
	if d.fileBytes["model.safetensors"] == 0 || d.fileBytes["reference.safetensors"] == 0 {
		t.Fatalf("%s/README.md does not state the file sizes: %v", name, d.fileBytes)
	}
	raw, err := os.ReadFile(filepath.Join(d.dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Checkpoint struct {
			Tensors map[string][]uint64 `json:"checkpoint_tensors"`
			DTypes  []string            `json:"checkpoint_dtypes"`
			Renamed map[string]string   `json:"renamed_on_save"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &d.ref); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ref.Checkpoint.DTypes, []string{"torch.float32"}) {
		t.Fatalf("%s: checkpoint dtypes %v; the tests below assume float32", name, ref.Checkpoint.DTypes)
	}
	d.tensors, d.renamed = ref.Checkpoint.Tensors, ref.Checkpoint.Renamed
	return d
}

func TestFixtureCheckpointsMatchTheirDocumentation(t *testing.T) {
	for _, tc := range []struct {
		fixture, arch, modelType string // from each README's file table
	}{
		{"qwen35-tiny", "Qwen3_5ForCausalLM", "qwen3_5_text"},
		{"dflash-tiny", "DFlashDraftModel", "qwen3"},
		{"dflash2-tiny", "DFlash2DraftModel", "qwen3"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			doc := readFixture(t, tc.fixture)
			f, err := Open(filepath.Join(doc.dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if len(f.Tensors()) != doc.count || len(doc.tensors) != doc.count {
				t.Fatalf("%d tensors; README says %d, reference.json lists %d", len(f.Tensors()), doc.count, len(doc.tensors))
			}
			for name, shape := range doc.tensors {
				ti, ok := f.Tensor(name)
				if !ok {
					t.Errorf("tensor %s missing", name)
					continue
				}
				if ti.DType != F32 || !slices.Equal(ti.Shape, shape) {
					t.Errorf("tensor %s: %v %v, want F32 %v", name, ti.DType, ti.Shape, shape)
				}
			}
			for file, size := range doc.fileBytes {
				st, err := os.Stat(filepath.Join(doc.dir, file))
				if err != nil || st.Size() != size {
					t.Errorf("%s: %v bytes (%v), README says %d", file, st.Size(), err, size)
				}
			}
			if f.Metadata()["format"] != "pt" {
				t.Errorf("metadata %v, want format=pt as transformers writes", f.Metadata())
			}

			c, err := OpenCheckpoint(doc.dir)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.Config == nil || c.Config.Architecture != tc.arch || c.Config.ModelType != tc.modelType {
				t.Errorf("config %+v, want %s / %s", c.Config, tc.arch, tc.modelType)
			}
			// reference.safetensors sits beside model.safetensors and must not leak in.
			if len(c.Tensors()) != doc.count || c.Index != "" {
				t.Errorf("checkpoint has %d tensors (index %q), want %d", len(c.Tensors()), c.Index, doc.count)
			}
			if (c.Files != Files{}) {
				t.Errorf("files %+v; the fixtures have no tokenizer or generation config", c.Files)
			}
		})
	}
}

// The int64 id tensors of reference.safetensors hold the same ids as
// reference.json: this checks data access end to end.
func TestFixtureReferenceIDs(t *testing.T) {
	for _, tc := range []struct{ fixture, tensor, jsonKey string }{
		{"qwen35-tiny", "prompt_ids", "prompt_ids"},
		{"qwen35-tiny", "greedy_ids", "greedy_ids"},
		{"dflash-tiny", "block_ids", "block_ids"},
		{"dflash2-tiny", "block_ids", "block_ids"},
	} {
		t.Run(tc.fixture+"/"+tc.tensor, func(t *testing.T) {
			doc := readFixture(t, tc.fixture)
			var want []int64
			if err := json.Unmarshal(doc.ref[tc.jsonKey], &want); err != nil || len(want) == 0 {
				t.Fatalf("reference.json %s: %v", tc.jsonKey, err)
			}
			f, err := Open(filepath.Join(doc.dir, "reference.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ti, ok := f.Tensor(tc.tensor)
			if !ok || ti.DType != I64 || !slices.Equal(ti.Shape, []uint64{uint64(len(want))}) {
				t.Fatalf("tensor %s: %+v, want I64 [%d]", tc.tensor, ti, len(want))
			}
			b, err := f.Bytes(tc.tensor)
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range want {
				if got := int64(binary.LittleEndian.Uint64(b[8*i:])); got != w {
					t.Fatalf("%s[%d] = %d, want %d", tc.tensor, i, got, w)
				}
			}
		})
	}
}
