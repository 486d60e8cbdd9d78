package loader

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// IndexName is the file name of a sharded checkpoint's index.
const IndexName = "model.safetensors.index.json"

// maxIndexSize bounds the index file read into memory. Real indexes are a
// few MB (one line per tensor); the bound matches the header limit.
const maxIndexSize = MaxHeaderSize

// Index is a decoded sharded-checkpoint index (model.safetensors.index.json,
// spec/safetensors.md section 5.2).
type Index struct {
	// WeightMap maps each tensor name to the file name of its shard,
	// relative to the index's folder. Every shard name has passed the
	// lexical confinement check (relative, no "..", no backslash or NUL).
	WeightMap map[string]string
	// TotalSize is metadata.total_size, meaningful when HasTotalSize.
	TotalSize    uint64
	HasTotalSize bool
	// TotalSizeIgnored says why a metadata.total_size that is not a byte
	// count was ignored ("" when it was read or absent). The field is
	// informational: no reader of these indexes (transformers,
	// huggingface_hub, mlx-lm) uses it, so a checkpoint loadable there is
	// not refused over it.
	TotalSizeIgnored string
}

// Shards returns the distinct shard file names of the index, sorted.
func (x *Index) Shards() []string {
	var out []string
	for _, s := range x.WeightMap {
		out = append(out, s)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ReadIndex reads and decodes the index file at path. It checks the JSON
// (a weight_map object of strings is required; a repeated key anywhere is an
// error) and each shard path, lexically; it does not look at the shards.
// Errors are *Error values with Kind ErrInvalidIndex or ErrInvalidShardPath.
func ReadIndex(path string) (*Index, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxIndexSize {
		return nil, &Error{File: path, Kind: ErrInvalidIndex,
			Detail: fmt.Sprintf("index is %d bytes, over the %d-byte limit: not an index", st.Size(), maxIndexSize)}
	}
	b := make([]byte, st.Size())
	if err := readFull(f, b, 0); err != nil {
		return nil, fmt.Errorf("loader: reading %s: %w", path, err)
	}
	return parseIndex(path, b)
}

// parseIndex decodes an index document. The walk is token-level, like the
// header's, so that a tensor listed twice in weight_map (with two different
// shards) is an error rather than "the last one wins".
func parseIndex(path string, b []byte) (*Index, error) {
	w := newWalker(path, "index", b, ErrInvalidIndex, ErrInvalidIndex, "fix the index or download it again")
	if bytes.HasPrefix(b, []byte("\xef\xbb\xbf")) {
		return nil, w.fail("", "index starts with a UTF-8 byte order mark (EF BB BF), which JSON does not allow (Python's json refuses it too): save it without one", nil)
	}
	if !utf8.Valid(b) {
		return nil, w.fail("", "index is not valid UTF-8", nil)
	}
	if off, ok := checkSurrogates(b); !ok {
		return nil, w.fail("", fmt.Sprintf("invalid \\u escape at byte %d: a UTF-16 surrogate without its pair", off), nil)
	}
	if err := w.delim('{', "", "the index"); err != nil {
		return nil, err
	}
	x := &Index{}
	seen := make(map[string]bool)
	for w.dec.More() {
		key, err := w.key("")
		if err != nil {
			return nil, err
		}
		if seen[key] {
			w.duplicate("", fmt.Sprintf("key %q appears twice at the top level of the index", key))
		}
		seen[key] = true
		switch key {
		case "weight_map":
			if x.WeightMap, err = w.weightMap(); err != nil {
				return nil, err
			}
		case "metadata":
			if err := w.indexMetadata(x); err != nil {
				return nil, err
			}
		default: // other keys carry nothing we use
			if err := w.skip(""); err != nil {
				return nil, err
			}
		}
	}
	if err := w.delim('}', "", "the index"); err != nil {
		return nil, err
	}
	if err := w.finish(b); err != nil {
		return nil, err
	}
	if x.WeightMap == nil {
		return nil, w.fail("", `index has no "weight_map" object`, nil)
	}
	if err := checkShardPaths(path, x.WeightMap); err != nil {
		return nil, err
	}
	return x, nil
}

// weightMap reads the weight_map object: tensor name -> shard file name.
func (w *walker) weightMap() (map[string]string, error) {
	if err := w.delim('{', "", "weight_map"); err != nil {
		return nil, err
	}
	m := make(map[string]string)
	for w.dec.More() {
		name, err := w.key("")
		if err != nil {
			return nil, err
		}
		tok, err := w.token(name)
		if err != nil {
			return nil, err
		}
		shard, ok := tok.(string)
		if !ok {
			return nil, w.fail(name, fmt.Sprintf("weight_map value must be a shard file name, found %s", describe(tok)), nil)
		}
		if _, dup := m[name]; dup {
			w.duplicate(name, "tensor listed twice in weight_map")
		}
		m[name] = shard
	}
	return m, w.delim('}', "", "weight_map")
}

// indexMetadata reads the metadata object, keeping total_size.
func (w *walker) indexMetadata(x *Index) error {
	if err := w.delim('{', "", "metadata"); err != nil {
		return err
	}
	seen := make(map[string]bool)
	for w.dec.More() {
		key, err := w.key("")
		if err != nil {
			return err
		}
		if seen[key] {
			w.duplicate("", fmt.Sprintf("key %q appears twice in metadata", key))
		}
		seen[key] = true
		if key != "total_size" {
			if err := w.skip(""); err != nil {
				return err
			}
			continue
		}
		tok, err := w.token("")
		if err != nil {
			return err
		}
		num, ok := tok.(json.Number)
		if !ok {
			if d, open := tok.(json.Delim); open && (d == '{' || d == '[') {
				if err := w.skipNested("", 1); err != nil {
					return err
				}
			}
			x.TotalSizeIgnored = fmt.Sprintf("metadata.total_size is not a number but %s", describe(tok))
			continue
		}
		v, ok := totalSize(num)
		if !ok {
			x.TotalSizeIgnored = fmt.Sprintf("metadata.total_size %s is not a byte count", num)
			continue
		}
		x.TotalSize, x.HasTotalSize = v, true
	}
	return w.delim('}', "", "metadata")
}

// totalSize accepts an integer or, since some writers emit one, an
// integral float such as 1.6e10.
func totalSize(num json.Number) (uint64, bool) {
	if v, err := strconv.ParseUint(string(num), 10, 64); err == nil {
		return v, true
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || f < 0 || f != math.Trunc(f) || f >= math.MaxUint64 {
		return 0, false
	}
	return uint64(f), true
}

// shardPathProblem says why a weight_map shard path is refused, or "" if it
// stays inside the checkpoint folder lexically. Symlinks are not resolved
// here: the Hugging Face cache links snapshot files into a blobs folder
// outside the snapshot, which is normal.
func shardPathProblem(p string) string {
	switch {
	case p == "":
		return "is empty"
	case strings.ContainsRune(p, 0):
		return "contains a NUL byte"
	case strings.Contains(p, `\`):
		return "contains a backslash"
	case filepath.IsAbs(p) || strings.HasPrefix(p, "/"):
		return "is absolute"
	case !filepath.IsLocal(p):
		return "leaves the checkpoint folder"
	case filepath.Clean(p) == ".":
		return "names the folder itself"
	}
	return ""
}

// checkShardPaths applies shardPathProblem to every shard of m and reports
// all refused paths in one error.
func checkShardPaths(indexPath string, m map[string]string) error {
	var bad []string
	byShard := make(map[string]string) // shard -> first tensor naming it
	for _, name := range slices.Sorted(maps.Keys(m)) {
		s := m[name]
		if _, done := byShard[s]; done {
			continue
		}
		byShard[s] = name
		if why := shardPathProblem(s); why != "" {
			bad = append(bad, fmt.Sprintf("%q (for tensor %q) %s", s, name, why))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return &Error{File: indexPath, Kind: ErrInvalidShardPath,
		Detail: fmt.Sprintf("invalid shard path %s in weight_map: shards must be relative file names inside the checkpoint folder", strings.Join(bad, ", "))}
}

// WriteIndex writes x as an index file at path, laid out as
// huggingface_hub writes one: an object with metadata.total_size (when
// x.HasTotalSize) and weight_map, keys sorted, indented by two spaces, with
// a final newline. Shard paths are checked as ReadIndex checks them, before
// anything is written.
func WriteIndex(path string, x *Index) error {
	if err := checkShardPaths(path, x.WeightMap); err != nil {
		return err
	}
	doc := map[string]any{"weight_map": x.WeightMap}
	if x.WeightMap == nil {
		doc["weight_map"] = map[string]string{} // ReadIndex requires the object
	}
	if x.HasTotalSize {
		doc["metadata"] = map[string]uint64{"total_size": x.TotalSize}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ShardRuns splits tensors of the given byte sizes, in order, into runs of
// at most max bytes (a tensor larger than max makes a run alone), as
// huggingface_hub and mlx-lm split a checkpoint into weights files: a run
// ends when the next tensor would not fit. Each run is the half-open range
// [start, end) of indices into sizes; there is none for no tensors.
func ShardRuns(sizes []int64, max int64) [][2]int {
	var runs [][2]int
	var size int64
	for i, n := range sizes {
		if len(runs) == 0 || size+n > max {
			runs, size = append(runs, [2]int{i, i}), 0
		}
		runs[len(runs)-1][1] = i + 1
		size += n
	}
	return runs
}

// ShardFileName is the name of weights file i (from 0) of n:
// model.safetensors when there is one, else model-00001-of-0000n.safetensors
// and so on, as huggingface_hub and mlx-lm name them.
func ShardFileName(i, n int) string {
	if n == 1 {
		return SingleFileName
	}
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)
}
