package loader

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// malformedCase is one broken input: a single file (opened with Open) or a
// checkpoint folder (opened with OpenCheckpoint), and the error it must give.
type malformedCase struct {
	name   string
	file   []byte            // a lone .safetensors file
	folder map[string][]byte // or a checkpoint folder: file name -> content
	kind   error             // the sentinel errors.Is must match
	tensor string            // the tensor the error must name, if any
	want   []string          // substrings the message must contain
}

// entry is a valid tensor entry of 8 bytes of F32 at [begin, begin+8).
const entry = `{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`

// lfsPointer is what a clone without git-lfs leaves in place of weights.
const lfsPointer = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 872816\n"

// shard returns the bytes of a valid safetensors file holding tensors.
func shard(tensors ...Tensor) []byte {
	var b bytes.Buffer
	if err := Write(&b, tensors, nil); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func malformedCases() []malformedCase {
	return []malformedCase{
		// Section 7 situations, recognised before the numbered rules.
		{name: "empty file", file: []byte{},
			kind: ErrEmpty, want: []string{"file is empty", "download it again"}},
		{name: "Git LFS pointer", file: []byte(lfsPointer),
			kind: ErrLFSPointer, want: []string{"Git LFS pointer (131 bytes), not weights", "git lfs pull", "Hugging Face CLI"}},
		{name: "HTML error page", file: []byte("<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n"),
			kind: ErrNotSafetensors, want: []string{"not a safetensors file (looks like HTML text"}},
		{name: "HTML shorter than the length field", file: []byte("<html>"),
			kind: ErrNotSafetensors, want: []string{"looks like HTML text"}},
		{name: "JSON error body", file: []byte(`{"error":"Repository Not Found"}`),
			kind: ErrNotSafetensors, want: []string{"looks like JSON text"}},

		// Rules 1 to 5.
		{name: "rule 1: shorter than the length field", file: []byte{1, 0, 0},
			kind: ErrHeaderTooSmall, want: []string{"file is 3 bytes", "rule 1"}},
		{name: "rule 2: header length over 100 MB", file: rawFile(MaxHeaderSize+1, "{}", 0),
			kind: ErrHeaderTooLarge, want: []string{"header length 100000001 exceeds 100 MB", "rule 2, HeaderTooLarge"}},
		{name: "rule 3: header length past the end", file: rawFile(64, "{}", 0),
			kind: ErrInvalidHeaderLength, want: []string{"header length 64 needs 72 bytes but the file has 10", "rule 3"}},
		{name: "rule 4: header not UTF-8", file: stFile("{\"\xff\":1}", 0),
			kind: ErrInvalidHeader, want: []string{"not valid UTF-8", "rule 4"}},
		{name: "rule 5: header not starting with a brace", file: stFile(` {"a":`+entry+`}`, 8),
			kind: ErrInvalidHeaderStart, want: []string{"does not start with '{'", "rule 5"}},
		{name: "rule 5: empty header", file: rawFile(0, "", 0),
			kind: ErrInvalidHeaderStart, want: []string{"does not start with '{'"}},

		// Rule 6: the header's JSON and its shape.
		{name: "rule 6: not JSON", file: stFile(`{not json}`, 0),
			kind: ErrInvalidHeaderDeserialization, want: []string{"invalid JSON", "invalid character 'n'", "rule 6"}},
		{name: "rule 6: JSON cut short", file: stFile(`{"a":{"dtype":"F32"`, 0),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{"invalid JSON", "unexpected EOF"}},
		{name: "rule 6: bytes after the object", file: stFile(`{} {}`, 0),
			kind: ErrInvalidHeaderDeserialization, want: []string{"unexpected bytes after the top-level object at byte 3"}},
		{name: "rule 6: unknown dtype", file: stFile(`{"a":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{`unknown dtype "F12"`}},
		{name: "rule 6: lower-case dtype", file: stFile(`{"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{`unknown dtype "f32"`}},
		{name: "rule 6: missing data_offsets", file: stFile(`{"a":{"dtype":"F32","shape":[2]}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{`no "data_offsets" field`}},
		{name: "rule 6: tensor entry not an object", file: stFile(`{"a":[1,2]}`, 0),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{"a tensor entry must be an object, found an array"}},
		{name: "rule 6: negative dimension", file: stFile(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{"shape: -2 is not a non-negative integer"}},
		{name: "rule 6: fractional dimension", file: stFile(`{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{"shape: 2.0 is not a non-negative integer"}},
		{name: "rule 6: exponent offset", file: stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8e0]}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{"data_offsets: 8e0 is not a non-negative integer"}},
		{name: "rule 6: number past uint64", file: stFile(`{"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{"18446744073709551616 does not fit in 64 bits"}},
		{name: "rule 6: three data offsets", file: stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{"data_offsets must hold exactly 2 integers, found 3"}},
		{name: "rule 6: shape as a string", file: stFile(`{"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{`shape must be an array, found the string "2"`}},
		{name: "rule 6: non-string metadata value", file: stFile(`{"__metadata__":{"format":1}}`, 0),
			kind: ErrInvalidHeaderDeserialization, want: []string{`__metadata__ value of "format" must be a string, found the number 1`}},
		{name: "rule 6: metadata not an object", file: stFile(`{"__metadata__":["pt"]}`, 0),
			kind: ErrInvalidHeaderDeserialization, want: []string{"__metadata__ must be an object of strings, found an array"}},
		{name: "rule 6: lone UTF-16 surrogate in a name", file: stFile(`{"\ud800x":`+entry+`}`, 8),
			kind: ErrInvalidHeaderDeserialization, want: []string{"surrogate without its pair"}},
		{name: "rule 6: unknown field nested too deep", file: stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":`+strings.Repeat("[", 200)+strings.Repeat("]", 200)+`}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "a", want: []string{"nested deeper than 128 levels"}},

		// Rule 7: repeated keys, at every level.
		{name: "rule 7: duplicate tensor name", file: stFile(`{"a":`+entry+`,"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, 16),
			kind: ErrDuplicateKey, tensor: "a", want: []string{`key "a" appears twice at the top level`, "rule 7"}},
		{name: "rule 7: duplicate field inside an entry", file: stFile(`{"a":{"dtype":"F32","shape":[2],"dtype":"I32","data_offsets":[0,8]}}`, 8),
			kind: ErrDuplicateKey, tensor: "a", want: []string{`field "dtype" appears twice in the tensor entry`}},
		{name: "rule 7: duplicate metadata key", file: stFile(`{"__metadata__":{"format":"pt","format":"np"}}`, 0),
			kind: ErrDuplicateKey, want: []string{`key "format" appears twice in __metadata__`}},
		{name: "rule 7: duplicate __metadata__", file: stFile(`{"__metadata__":{},"__metadata__":{}}`, 0),
			kind: ErrDuplicateKey, want: []string{`key "__metadata__" appears twice`}},
		{name: "rule 6 is reported before rule 7", file: stFile(`{"a":`+entry+`,"a":`+entry+`,"b":{"dtype":"X"}}`, 8),
			kind: ErrInvalidHeaderDeserialization, tensor: "b", want: []string{`unknown dtype "X"`}},

		// Rules 8 to 12: the data layout.
		{name: "rule 8: first tensor not at 0", file: stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12),
			kind: ErrInvalidOffset, tensor: "a", want: []string{"the first tensor must start at 0", "rule 8, InvalidOffset"}},
		{name: "rule 8: gap between tensors", file: stFile(`{"a":`+entry+`,"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}`, 20),
			kind: ErrInvalidOffset, tensor: "b", want: []string{`leave a gap of 4 bytes after tensor "a"`}},
		{name: "rule 8: overlapping tensors", file: stFile(`{"a":`+entry+`,"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8),
			kind: ErrInvalidOffset, tensor: "b", want: []string{`overlap tensor "a" (which ends at 8)`}},
		{name: "rule 8: end before begin", file: stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, 8),
			kind: ErrInvalidOffset, tensor: "a", want: []string{"end before they begin"}},
		{name: "rule 9: element count overflows", file: stFile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0),
			kind: ErrValidationOverflow, tensor: "a", want: []string{"shape [4294967296, 4294967296] of U8 overflows 64 bits", "rule 9"}},
		{name: "rule 9: bit count overflows", file: stFile(`{"a":{"dtype":"F64","shape":[1152921504606846976],"data_offsets":[0,0]}}`, 0),
			kind: ErrValidationOverflow, tensor: "a", want: []string{"of F64 overflows 64 bits"}},
		{name: "rule 10: sub-byte tensor not byte aligned", file: stFile(`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2),
			kind: ErrMisalignedSlice, tensor: "a", want: []string{"shape [3] of F4 is 12 bits, not a whole number of bytes", "rule 10"}},
		{name: "rule 11: byte range not matching shape and dtype", file: stFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8),
			kind: ErrTensorInvalidInfo, tensor: "a", want: []string{"hold 8 bytes but shape [3] of F32 needs 12", "rule 11"}},
		{name: "rule 12: truncated download", file: stFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 10),
			kind: ErrMetadataIncompleteBuffer, want: []string{"file is truncated: the header needs 16 bytes of tensor data, the file has 10", "rule 12"}},
		{name: "rule 12: trailing bytes", file: stFile(`{"a":`+entry+`}`, 11),
			kind: ErrMetadataIncompleteBuffer, want: []string{"3 trailing bytes after the last tensor's data"}},

		// Checkpoint folders and indexes (section 5).
		{name: "no index and no model.safetensors", folder: map[string][]byte{
			"consolidated.safetensors": shard(f32("a", 2)), "extra.safetensors": shard(f32("b", 2))},
			kind: ErrNoWeights, want: []string{"no model.safetensors.index.json and no model.safetensors", "found: consolidated.safetensors, extra.safetensors", "need an index"}},
		{name: "shard path escaping the folder", folder: map[string][]byte{
			IndexName: []byte(`{"weight_map":{"a":"../outside.safetensors"}}`)},
			kind: ErrInvalidShardPath, want: []string{`invalid shard path "../outside.safetensors" (for tensor "a") leaves the checkpoint folder in weight_map`}},
		{name: "missing shards", folder: map[string][]byte{
			IndexName:                     []byte(`{"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors","c":"m-3.safetensors"}}`),
			"m-2.safetensors":             shard(f32("b", 2)),
			"unrelated-model.safetensors": shard(f32("a", 2))},
			kind: ErrMissingShards, want: []string{"checkpoint incomplete: missing shards m-1.safetensors, m-3.safetensors (referenced by model.safetensors.index.json)"}},
		{name: "index duplicate key", folder: map[string][]byte{
			IndexName:         []byte(`{"weight_map":{"a":"m-1.safetensors","a":"m-2.safetensors"}}`),
			"m-1.safetensors": shard(f32("a", 2)), "m-2.safetensors": shard(f32("a", 2))},
			kind: ErrInvalidIndex, tensor: "a", want: []string{"tensor listed twice in weight_map"}},
		{name: "index without weight_map", folder: map[string][]byte{
			IndexName: []byte(`{"metadata":{"total_size":8}}`)},
			kind: ErrInvalidIndex, want: []string{`index has no "weight_map" object`}},
		{name: "indexed tensor absent from its shard", folder: map[string][]byte{
			IndexName:         []byte(`{"weight_map":{"a":"m-1.safetensors","b":"m-1.safetensors"}}`),
			"m-1.safetensors": shard(f32("a", 2))},
			kind: ErrIndexTensorMissing, want: []string{`1 indexed tensors are not in their shard's header: "b" (in m-1.safetensors)`}},
		{name: "malformed shard", folder: map[string][]byte{
			IndexName:         []byte(`{"weight_map":{"a":"m-1.safetensors"}}`),
			"m-1.safetensors": []byte(lfsPointer)},
			kind: ErrLFSPointer, want: []string{"m-1.safetensors: Git LFS pointer"}},
	}
}

// TestMalformedInputs opens each broken input and checks that it fails with
// its own error: the right sentinel, the file and tensor named, and a message
// that says what was found.
func TestMalformedInputs(t *testing.T) {
	for _, tc := range malformedCases() {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var path string
			var err error
			if tc.folder == nil {
				path = writeFile(t, dir, "model.safetensors", tc.file)
				var f *File
				if f, err = Open(path); err == nil {
					f.Close()
				}
			} else {
				for name, b := range tc.folder {
					writeFile(t, dir, name, b)
				}
				path = dir
				var c *Checkpoint
				if c, err = OpenCheckpoint(dir); err == nil {
					c.Close()
				}
			}
			if err == nil {
				t.Fatal("opened without error")
			}
			if !errors.Is(err, tc.kind) {
				t.Fatalf("error %q is not %q", err, tc.kind)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %q is not a *loader.Error", err)
			}
			if !strings.HasPrefix(e.File, path) || !strings.Contains(err.Error(), e.File) {
				t.Errorf("error names file %q, want %s (message %q)", e.File, path, err)
			}
			if e.Tensor != tc.tensor {
				t.Errorf("error names tensor %q, want %q", e.Tensor, tc.tensor)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q\ndoes not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("message is not one line: %q", err)
			}
		})
	}
}

// TestMalformedCasesAreDistinct keeps the table honest: no two cases may be
// satisfied by the same error.
func TestMalformedCasesAreDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range malformedCases() {
		key := tc.kind.Error() + "|" + strings.Join(tc.want, "|")
		if other, dup := seen[key]; dup {
			t.Errorf("cases %q and %q expect the same error", other, tc.name)
		}
		seen[key] = tc.name
	}
}
