package loader

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzHeader feeds arbitrary files to the reader. It must never panic, never
// ask for bytes beyond the file (so nothing is sized by an unchecked header
// length), fail only with *Error values, and every file it accepts must
// satisfy every rule, checked here independently with encoding/json.
func FuzzHeader(f *testing.F) {
	for _, tc := range malformedCases() {
		if tc.file != nil {
			f.Add(tc.file)
		}
	}
	golden, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.safetensors"))
	for _, p := range golden {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(stFile(`{"a":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},"b":{"dtype":"F6_E3M2","shape":[4],"data_offsets":[3,6]}}`, 6))
	f.Add(stFile(`{"__metadata__":{"k":"v"},"z":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"y":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, 1))

	f.Fuzz(func(t *testing.T, data []byte) {
		r := &checkedReader{t: t, b: data}
		l, err := decode("fuzz.safetensors", r, int64(len(data)))
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind == nil || e.File != "fuzz.safetensors" {
				t.Fatalf("error %v (%T) is not a loader *Error naming the file", err, err)
			}
			return
		}
		verifyAccepted(t, data, l)
	})
}

// checkedReader fails the test when asked for bytes outside the file.
type checkedReader struct {
	t *testing.T
	b []byte
}

func (r *checkedReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(r.b)) {
		r.t.Fatalf("read of %d bytes at %d from a %d-byte file", len(p), off, len(r.b))
	}
	return copy(p, r.b[off:]), nil
}

// verifyAccepted checks an accepted file against rules 1 to 12 without the
// reader's own code.
func verifyAccepted(t *testing.T, data []byte, l *layout) {
	if len(data) < 8 {
		t.Fatal("accepted a file shorter than 8 bytes")
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize || n > uint64(len(data))-8 || n != l.headerLen {
		t.Fatalf("accepted header length %d for a %d-byte file", n, len(data))
	}
	h := data[8 : 8+n]
	if !utf8.Valid(h) || len(h) == 0 || h[0] != '{' || !json.Valid(h) {
		t.Fatalf("accepted a header that is not a UTF-8 JSON object: %q", h)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(h, &top); err != nil {
		t.Fatalf("accepted header %q: %v", h, err)
	}
	md, hasMD := top[metadataKey]
	if hasMD {
		delete(top, metadataKey)
		var m map[string]string
		if err := json.Unmarshal(md, &m); err != nil || !mapsEqual(m, l.metadata) || (m == nil) != (l.metadata == nil) {
			t.Fatalf("metadata %s decoded as %v, reader has %v (%v)", md, m, l.metadata, err)
		}
	}
	// A duplicate key would leave fewer map entries than tensors.
	if len(top) != len(l.tensors) {
		t.Fatalf("header has %d distinct tensor keys, reader returned %d tensors", len(top), len(l.tensors))
	}
	base := int64(8 + n)
	for _, ti := range l.tensors {
		var e struct {
			DType   string   `json:"dtype"`
			Shape   []uint64 `json:"shape"`
			Offsets []uint64 `json:"data_offsets"`
		}
		raw, ok := top[ti.Name]
		if !ok {
			t.Fatalf("tensor %q is not a header key", ti.Name)
		}
		// Decode the exact keys: encoding/json matches struct fields
		// case-insensitively, but the format's keys are case-sensitive (an
		// entry may also carry an unknown "dtYpE", which readers ignore).
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			t.Fatalf("tensor %q entry %s: %v", ti.Name, raw, err)
		}
		for key, dst := range map[string]any{"dtype": &e.DType, "shape": &e.Shape, "data_offsets": &e.Offsets} {
			if err := json.Unmarshal(fields[key], dst); err != nil {
				t.Fatalf("tensor %q entry %s: %s: %v", ti.Name, raw, key, err)
			}
		}
		if e.DType != ti.DType.String() || !slices.Equal(e.Shape, ti.Shape) || len(e.Offsets) != 2 ||
			ti.Offset != base+int64(e.Offsets[0]) || ti.Size != int64(e.Offsets[1]-e.Offsets[0]) {
			t.Fatalf("tensor %q: entry %s, reader %+v", ti.Name, raw, ti)
		}
		bits := new(big.Int).SetUint64(ti.DType.Bits())
		for _, d := range e.Shape {
			bits.Mul(bits, new(big.Int).SetUint64(d))
		}
		if bits.Cmp(new(big.Int).Mul(big.NewInt(ti.Size), big.NewInt(8))) != 0 {
			t.Fatalf("tensor %q: %d bytes for %v of %v", ti.Name, ti.Size, ti.Shape, ti.DType)
		}
	}
	sorted := slices.SortedFunc(slices.Values(l.tensors), func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(a.Offset, b.Offset), cmp.Compare(a.Size, b.Size))
	})
	pos := base
	for _, ti := range sorted {
		if ti.Offset != pos {
			t.Fatalf("tensor %q at %d, want %d: gap or overlap", ti.Name, ti.Offset, pos)
		}
		pos += ti.Size
	}
	if pos != int64(len(data)) {
		t.Fatalf("tensors end at %d in a %d-byte file", pos, len(data))
	}
}

// FuzzIndex feeds arbitrary documents to the index parser. It must never
// panic, fail only with ErrInvalidIndex or ErrInvalidShardPath, and every
// index it accepts must decode to the same weight map with encoding/json,
// with every shard path inside the folder, and read back the same once
// WriteIndex has written it.
func FuzzIndex(f *testing.F) {
	for _, tc := range malformedCases() {
		if b, ok := tc.folder[IndexName]; ok {
			f.Add(b)
		}
	}
	f.Add([]byte(tinyIndex))
	f.Add([]byte(`{"metadata":{"total_size":1.6e10,"format":{"a":[1]}},"weight_map":{"a":"sub/../x.safetensors","b":"..x"}}`))
	f.Add([]byte(`{"weight_map":{"a":"\u0000","b":"a\\b","c":"/x"}}`))
	f.Add([]byte(`{"weight_map":{"\ud800":"x"}}`))

	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := parseIndex("fuzz.json", data)
		if err != nil {
			if !errors.Is(err, ErrInvalidIndex) && !errors.Is(err, ErrInvalidShardPath) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			_ = err.Error()
			return
		}
		var doc struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if !utf8.Valid(data) || json.Unmarshal(data, &doc) != nil || doc.WeightMap == nil {
			t.Fatalf("accepted %q", data)
		}
		if !mapsEqual(doc.WeightMap, x.WeightMap) {
			t.Fatalf("weight_map %v, encoding/json says %v", x.WeightMap, doc.WeightMap)
		}
		for _, s := range x.Shards() {
			if !filepath.IsLocal(s) || strings.ContainsAny(s, "\\\x00") || strings.HasPrefix(s, "/") {
				t.Fatalf("accepted shard path %q", s)
			}
		}
		p := filepath.Join(t.TempDir(), IndexName)
		if err := WriteIndex(p, x); err != nil {
			t.Fatalf("WriteIndex of an accepted index: %v", err)
		}
		back, err := ReadIndex(p)
		if err != nil || !mapsEqual(back.WeightMap, x.WeightMap) || back.TotalSize != x.TotalSize || back.HasTotalSize != x.HasTotalSize {
			t.Fatalf("written and read back as %+v (%v), want %+v", back, err, x)
		}
	})
}
