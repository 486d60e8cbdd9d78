package loader

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Tensor is a tensor to write: a name, a dtype, a shape and its bytes in
// little-endian, row-major order (elements·bits/8 of them).
type Tensor struct {
	Name  string
	DType DType
	Shape []uint64 // empty for rank 0
	Data  []byte
}

// Write writes tensors and metadata to w in the safetensors format, laid out
// as the reference crate lays it out (spec/safetensors.md section 4), so that
// for the same input the bytes are identical: tensors sorted by descending
// dtype alignment then by name, contiguous offsets from 0, compact JSON with
// __metadata__ first, the header padded with spaces to a multiple of 8.
//
// A nil metadata map writes no __metadata__; a non-nil one, even empty, is
// written. Metadata keys are written in sorted order: the crate keeps them in
// a hash map, so its own order varies from run to run.
//
// Everything is checked before the first byte is written: each dtype is
// valid, each name is valid UTF-8, unique and not "__metadata__", each Data
// holds exactly shape × dtype bytes, and the header fits MaxHeaderSize.
// Errors are *Error values with Kind ErrInvalidTensor or ErrHeaderTooLarge.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	return write("", w, tensors, metadata)
}

// WriteFile writes a safetensors file at path as Write does. It writes a
// temporary file in the same folder and renames it into place, so a failed
// write never leaves a partial file under the final name.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := write(path, tmp, tensors, metadata); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func write(path string, w io.Writer, tensors []Tensor, metadata map[string]string) error {
	header, order, err := encodeHeader(path, tensors, metadata)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var n [lengthSize]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	bw.Write(n[:])
	bw.Write(header)
	for _, i := range order {
		bw.Write(tensors[i].Data)
	}
	return bw.Flush() // bufio.Writer keeps the first error
}

// encodeHeader checks the tensors and returns the padded header and the
// order in which their data follow it.
func encodeHeader(path string, tensors []Tensor, metadata map[string]string) ([]byte, []int, error) {
	bad := func(name, format string, args ...any) error {
		return &Error{File: path, Tensor: name, Kind: ErrInvalidTensor, Detail: fmt.Sprintf(format, args...)}
	}
	seen := make(map[string]bool, len(tensors))
	for _, t := range tensors {
		switch {
		case !utf8.ValidString(t.Name):
			return nil, nil, bad(t.Name, "name is not valid UTF-8")
		case t.Name == metadataKey:
			return nil, nil, bad(t.Name, "the name %s is reserved for the metadata map", metadataKey)
		case seen[t.Name]:
			return nil, nil, bad(t.Name, "name given twice")
		case !t.DType.Valid():
			return nil, nil, bad(t.Name, "invalid dtype %v", t.DType)
		}
		seen[t.Name] = true
		want, err := byteSize(t.DType, t.Shape)
		if err != nil {
			return nil, nil, bad(t.Name, "%v", err)
		}
		if uint64(len(t.Data)) != want {
			return nil, nil, bad(t.Name, "data holds %d bytes but shape %s of %s needs %d", len(t.Data), formatShape(t.Shape), t.DType, want)
		}
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, nil, bad("", "metadata entry %q is not valid UTF-8", k)
		}
	}

	order := make([]int, len(tensors))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ta, tb := &tensors[a], &tensors[b]
		return cmp.Or(cmp.Compare(tb.DType, ta.DType), cmp.Compare(ta.Name, tb.Name))
	})

	// Compact JSON exactly as serde_json writes it. Writing it by hand keeps
	// encoding/json's HTML and U+2028 escaping out of the bytes.
	h := []byte{'{'}
	if metadata != nil {
		h = appendString(h, metadataKey)
		h = append(h, ':', '{')
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if i > 0 {
				h = append(h, ',')
			}
			h = appendString(h, k)
			h = append(h, ':')
			h = appendString(h, metadata[k])
		}
		h = append(h, '}')
	}
	var offset uint64
	for i, idx := range order {
		t := &tensors[idx]
		if i > 0 || metadata != nil {
			h = append(h, ',')
		}
		h = appendString(h, t.Name)
		h = append(h, `:{"dtype":`...)
		h = appendString(h, t.DType.String())
		h = append(h, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				h = append(h, ',')
			}
			h = strconv.AppendUint(h, d, 10)
		}
		h = append(h, `],"data_offsets":[`...)
		h = strconv.AppendUint(h, offset, 10)
		h = append(h, ',')
		offset += uint64(len(t.Data))
		h = strconv.AppendUint(h, offset, 10)
		h = append(h, "]}"...)
	}
	h = append(h, '}')
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	if len(h) > MaxHeaderSize {
		return nil, nil, &Error{File: path, Kind: ErrHeaderTooLarge,
			Detail: fmt.Sprintf("header would be %d bytes, over the 100 MB limit readers enforce: split the tensors over several shards", len(h))}
	}
	return h, order, nil
}

// byteSize returns elements·bits/8 for a shape and dtype, refusing overflow
// and sizes that are not a whole number of bytes (rules 9 and 10).
func byteSize(d DType, shape []uint64) (uint64, error) {
	bits, ok := tensorBits(d, shape)
	if !ok {
		return 0, fmt.Errorf("shape %s of %s overflows 64 bits", formatShape(shape), d)
	}
	if bits%8 != 0 {
		return 0, fmt.Errorf("shape %s of %s is %d bits, not a whole number of bytes", formatShape(shape), d, bits)
	}
	return bits / 8, nil
}

// appendString appends s as a JSON string the way serde_json does: quote and
// backslash escaped, \b \f \n \r \t short forms, other control characters as
// \u00xx (lower-case hex), everything else (DEL, non-ASCII) as is.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
