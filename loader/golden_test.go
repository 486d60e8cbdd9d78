package loader

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The golden files in testdata/golden were written by the reference crate
// (safetensors 0.8.0, Python) with testdata/make_golden.py, which also wrote
// golden.json: the input of each file. Our reader must read them as
// described and our writer must reproduce them byte for byte.

type goldenCase struct {
	File     string            `json:"file"`
	Metadata map[string]string `json:"metadata"`
	Tensors  []goldenTensor    `json:"tensors"`
}

type goldenTensor struct {
	Name  string   `json:"name"`
	DType string   `json:"dtype"`
	Shape []uint64 `json:"shape"`
	Data  string   `json:"data"` // hex
}

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Cases) == 0 {
		t.Fatal("golden.json lists no cases")
	}
	return m.Cases
}

// tensors converts a case's description into writer input.
func (c goldenCase) tensors(t *testing.T) []Tensor {
	t.Helper()
	var out []Tensor
	for _, x := range c.Tensors {
		d, ok := ParseDType(x.DType)
		if !ok {
			t.Fatalf("%s: unknown dtype %q in golden.json", c.File, x.DType)
		}
		data, err := hex.DecodeString(x.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Tensor{Name: x.Name, DType: d, Shape: x.Shape, Data: data})
	}
	return out
}

func TestReaderReadsCrateGoldenFiles(t *testing.T) {
	for _, c := range loadGolden(t) {
		t.Run(c.File, func(t *testing.T) {
			f, err := Open(filepath.Join("testdata", "golden", c.File))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			want := c.tensors(t)
			got := f.Tensors()
			if len(got) != len(want) {
				t.Fatalf("%d tensors, want %d", len(got), len(want))
			}
			for _, w := range want {
				g, ok := f.Tensor(w.Name)
				if !ok {
					t.Fatalf("tensor %q missing", w.Name)
				}
				if g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) {
					t.Errorf("tensor %q: %v %v, want %v %v", w.Name, g.DType, g.Shape, w.DType, w.Shape)
				}
				data, err := f.Bytes(w.Name)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(data, w.Data) {
					t.Errorf("tensor %q: data %x, want %x", w.Name, data, w.Data)
				}
			}
			if md := f.Metadata(); !mapsEqual(md, c.Metadata) {
				t.Errorf("metadata %v, want %v", md, c.Metadata)
			}
			for i := 1; i < len(got); i++ {
				if got[i].Offset != got[i-1].Offset+got[i-1].Size {
					t.Errorf("Tensors() not in contiguous file order at %d: %+v after %+v", i, got[i], got[i-1])
				}
			}
		})
	}
}

func TestWriterReproducesCrateGoldenFiles(t *testing.T) {
	for _, c := range loadGolden(t) {
		t.Run(c.File, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", "golden", c.File))
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := Write(&got, c.tensors(t), c.Metadata); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("bytes differ from the crate's\n got %q\nwant %q", got.Bytes(), want)
			}
		})
	}
}

var roundTripDir = flag.String("roundtrip-dir", "", "also write TestWriterRoundTripDir's files and manifest.json here, for `python3 testdata/make_golden.py --check DIR`")

// TestWriterRoundTripDir writes files the crate cannot reproduce itself
// (F6 dtypes, several metadata keys, metadata on a file with no tensors)
// together with the golden inputs, reads them back with our reader, and,
// with -roundtrip-dir, leaves them with a manifest for the Python check.
func TestWriterRoundTripDir(t *testing.T) {
	cases := loadGolden(t)
	extra := []goldenCase{
		{File: "go_f6.safetensors", Metadata: map[string]string{"z": "1", "a": "2", "m": "3"}},
		{File: "go_empty_metadata.safetensors", Metadata: map[string]string{}},
	}
	for _, d := range []DType{F6_E2M3, F6_E3M2, F4, F8_E8M0, BF16} {
		extra[0].Tensors = append(extra[0].Tensors, goldenTensor{
			Name: "w_" + d.String(), DType: d.String(), Shape: []uint64{2, 4},
			Data: hex.EncodeToString(bytes.Repeat([]byte{byte(d)}, int(8*d.Bits()/8))),
		})
	}
	for i := range cases {
		cases[i].File = "go_" + cases[i].File
	}
	cases = append(cases, extra...)

	dir := *roundTripDir
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.File)
		if err := WriteFile(p, c.tensors(t), c.Metadata); err != nil {
			t.Fatal(err)
		}
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.tensors(t) {
			data, err := f.Bytes(w.Name)
			g, _ := f.Tensor(w.Name)
			if err != nil || !bytes.Equal(data, w.Data) || g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) {
				t.Errorf("%s: tensor %q read back as %v %v %x (%v)", c.File, w.Name, g.DType, g.Shape, data, err)
			}
		}
		if !mapsEqual(f.Metadata(), c.Metadata) || (f.Metadata() == nil) != (c.Metadata == nil) {
			t.Errorf("%s: metadata %v, want %v", c.File, f.Metadata(), c.Metadata)
		}
		f.Close()
	}
	manifest, err := json.MarshalIndent(map[string]any{"cases": cases}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
