package loader

import (
	"bytes"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseIndex(t *testing.T) {
	tests := []struct {
		name      string
		doc       string
		shards    []string
		total     uint64
		haveTotal bool
		ignored   string
	}{
		{name: "typical index",
			doc:    `{"metadata":{"total_size":24},"weight_map":{"a":"m-00001-of-00002.safetensors","b":"m-00002-of-00002.safetensors","c":"m-00001-of-00002.safetensors"}}`,
			shards: []string{"m-00001-of-00002.safetensors", "m-00002-of-00002.safetensors"}, total: 24, haveTotal: true},
		{name: "total_size written as a float", doc: `{"metadata":{"total_size":1.6e10},"weight_map":{"a":"x.safetensors"}}`,
			shards: []string{"x.safetensors"}, total: 16_000_000_000, haveTotal: true},
		{name: "no metadata, unknown keys skipped", doc: `{"format":{"v":[1,2]},"weight_map":{"a":"sub/x.safetensors"}}`,
			shards: []string{"sub/x.safetensors"}},
		{name: "other metadata keys skipped", doc: `{"metadata":{"format":"pt","nested":{"total_size":"no"}},"weight_map":{}}`},
		// total_size is informational (transformers, huggingface_hub and
		// mlx-lm never read it): one that is not a byte count is ignored,
		// with the reason, rather than refusing a loadable checkpoint.
		{name: "total_size a string", doc: `{"metadata":{"total_size":"8"},"weight_map":{"a":"x.safetensors"}}`,
			shards: []string{"x.safetensors"}, ignored: "metadata.total_size is not a number but the string \"8\""},
		{name: "total_size negative", doc: `{"metadata":{"total_size":-8},"weight_map":{}}`,
			ignored: "metadata.total_size -8 is not a byte count"},
		{name: "total_size an object, then more metadata", doc: `{"metadata":{"total_size":{"a":[1,{"b":2}]},"format":"pt"},"weight_map":{"a":"x.safetensors"}}`,
			shards: []string{"x.safetensors"}, ignored: "metadata.total_size is not a number but an object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x, err := parseIndex("i.json", []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := x.Shards(); !slices.Equal(got, tc.shards) {
				t.Errorf("shards %q, want %q", got, tc.shards)
			}
			if x.TotalSize != tc.total || x.HasTotalSize != tc.haveTotal || x.TotalSizeIgnored != tc.ignored {
				t.Errorf("total_size %d (%v, ignored %q), want %d (%v, ignored %q)", x.TotalSize, x.HasTotalSize, x.TotalSizeIgnored, tc.total, tc.haveTotal, tc.ignored)
			}
		})
	}
}

func TestParseIndexRefuses(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		kind error
		want string
	}{
		{"duplicate top-level key", `{"weight_map":{},"weight_map":{}}`, ErrInvalidIndex, `key "weight_map" appears twice at the top level`},
		{"duplicate metadata key", `{"metadata":{"total_size":1,"total_size":2},"weight_map":{}}`, ErrInvalidIndex, `key "total_size" appears twice in metadata`},
		{"shard name not a string", `{"weight_map":{"a":1}}`, ErrInvalidIndex, "weight_map value must be a shard file name, found the number 1"},
		{"weight_map not an object", `{"weight_map":[]}`, ErrInvalidIndex, "weight_map must be an object"},
		// An index is not a header: the message names the document it is.
		{"not JSON", `weight_map`, ErrInvalidIndex, "invalid JSON near byte 0 of the index"},
		// Python's json.load refuses a byte order mark too ("Unexpected UTF-8
		// BOM"); say what it is rather than "invalid JSON near byte 0".
		{"byte order mark", "\ufeff" + `{"weight_map":{}}`, ErrInvalidIndex, "starts with a UTF-8 byte order mark (EF BB BF), which JSON does not allow"},
		{"trailing text", `{"weight_map":{}} x`, ErrInvalidIndex, "unexpected bytes after the top-level object"},
		{"not UTF-8", "{\"weight_map\":{\"\xff\":\"x\"}}", ErrInvalidIndex, "not valid UTF-8"},
		{"absolute shard path", `{"weight_map":{"a":"/etc/x.safetensors"}}`, ErrInvalidShardPath, `"/etc/x.safetensors" (for tensor "a") is absolute`},
		{"all bad shard paths listed", `{"weight_map":{"a":"../x","b":"ok.safetensors","c":"d\\e"}}`, ErrInvalidShardPath, `"../x" (for tensor "a") leaves the checkpoint folder, "d\\e" (for tensor "c") contains a backslash`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseIndex("i.json", []byte(tc.doc))
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant %v containing %q", err, tc.kind, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "i.json: ") {
				t.Errorf("message does not start with the file: %q", err)
			}
		})
	}
}

func TestShardPathConfinement(t *testing.T) {
	tests := []struct {
		path string
		why  string // "" = accepted
	}{
		{"model-00001-of-00002.safetensors", ""},
		{"sub/dir/x.safetensors", ""},
		{"sub/../x.safetensors", ""}, // stays inside after cleaning
		{"./x.safetensors", ""},
		{"..x.safetensors", ""}, // a name starting with dots, not a parent
		{"../outside.safetensors", "leaves the checkpoint folder"},
		{"sub/../../x.safetensors", "leaves the checkpoint folder"},
		{"..", "leaves the checkpoint folder"},
		{"/abs/x.safetensors", "is absolute"},
		{`sub\x.safetensors`, "contains a backslash"},
		{`..\x.safetensors`, "contains a backslash"},
		{"x\x00.safetensors", "contains a NUL byte"},
		{"", "is empty"},
		{".", "names the folder itself"},
		{"sub/..", "names the folder itself"},
	}
	for _, tc := range tests {
		if got := shardPathProblem(tc.path); got != tc.why {
			t.Errorf("shardPathProblem(%q) = %q, want %q", tc.path, got, tc.why)
		}
	}
}

// captureLogs routes slog's default logger into a buffer for one test.
func captureLogs(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(old) })
	return &buf
}

// WriteIndex writes what huggingface_hub writes for the same map, and
// ReadIndex reads it back; a shard path ReadIndex would refuse is refused
// before anything is written.
func TestWriteIndex(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, IndexName)
	x := &Index{WeightMap: map[string]string{"b": "model-00002-of-00002.safetensors", "a": "model-00001-of-00002.safetensors"},
		TotalSize: 24, HasTotalSize: true}
	if err := WriteIndex(p, x); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// json.dumps(index, indent=2, sort_keys=True) + "\n"
	const want = `{
  "metadata": {
    "total_size": 24
  },
  "weight_map": {
    "a": "model-00001-of-00002.safetensors",
    "b": "model-00002-of-00002.safetensors"
  }
}
`
	if string(got) != want {
		t.Errorf("index\n%s\nwant\n%s", got, want)
	}
	back, err := ReadIndex(p)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(back.WeightMap, x.WeightMap) || back.TotalSize != 24 || !back.HasTotalSize {
		t.Errorf("read back %+v, want %+v", back, x)
	}

	bad := filepath.Join(dir, "bad.index.json")
	if err := WriteIndex(bad, &Index{WeightMap: map[string]string{"a": "../x.safetensors"}}); !errors.Is(err, ErrInvalidShardPath) {
		t.Fatalf("WriteIndex of a shard outside the folder = %v, want ErrInvalidShardPath", err)
	}
	if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused index was written (%v)", err)
	}
}

// ShardRuns groups tensors in order, starting a run when the next tensor
// would push it past the bound, a tensor past the bound alone; ShardFileName
// names one file plainly and several by number.
func TestShardRunsAndNames(t *testing.T) {
	for _, c := range []struct {
		sizes []int64
		want  [][2]int
	}{
		{nil, nil},
		{[]int64{3}, [][2]int{{0, 1}}},
		{[]int64{4, 6, 1}, [][2]int{{0, 2}, {2, 3}}},
		{[]int64{5, 5, 5}, [][2]int{{0, 2}, {2, 3}}},
		{[]int64{2, 30, 2, 2}, [][2]int{{0, 1}, {1, 2}, {2, 4}}},
		{[]int64{0, 0, 10, 0}, [][2]int{{0, 4}}},
	} {
		if got := ShardRuns(c.sizes, 10); !slices.Equal(got, c.want) {
			t.Errorf("ShardRuns(%v, 10) = %v, want %v", c.sizes, got, c.want)
		}
	}
	if got := ShardFileName(0, 1); got != "model.safetensors" {
		t.Errorf("one file: %q", got)
	}
	if got := ShardFileName(1, 12); got != "model-00002-of-00012.safetensors" {
		t.Errorf("file 2 of 12: %q", got)
	}
}
