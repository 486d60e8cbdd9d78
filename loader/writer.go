package loader

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
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

// TensorHeader is a tensor's entry in a header, without its bytes: what
// NewWriter and Create lay a file out from when the bytes come later.
type TensorHeader struct {
	Name  string
	DType DType
	Shape []uint64 // empty for rank 0
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
	e, err := encodeTensors("", tensors, metadata)
	if err != nil {
		return err
	}
	return writeData(newWriter("", w, e), tensors)
}

// WriteFile writes a safetensors file at path as Write does. It writes a
// temporary file in the same folder and renames it into place, so a failed
// write never leaves a partial file under the final name.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	e, err := encodeTensors(path, tensors, metadata)
	if err != nil {
		return err
	}
	w, err := createFile(path, e)
	if err != nil {
		return err
	}
	defer w.Abort()
	return writeData(w, tensors)
}

// writeData writes the tensors' bytes in file order and closes w.
func writeData(w *Writer, tensors []Tensor) error {
	for _, i := range w.Order() {
		if _, err := w.Write(tensors[i].Data); err != nil {
			return err
		}
	}
	return w.Close()
}

// Writer writes a safetensors file whose tensor bytes are produced after its
// header, so that a large file can be written piece by piece in bounded
// memory. NewWriter and Create write the header at once; the caller then
// writes every tensor's bytes through Write, tensor after tensor in the
// order Order gives; Close checks that exactly the bytes the header declares
// were written. The file is the one Write makes of the same tensors. A
// Writer is not safe for concurrent use.
type Writer struct {
	path string // for errors; "" for a plain io.Writer
	bw   *bufio.Writer
	enc  *encoded
	n    uint64 // data bytes written so far
	err  error  // the first failure; every later call returns it
	file *os.File
	done bool // closed or aborted
}

// NewWriter checks tensors and metadata as Write does and writes the header
// to w. Writes to w are buffered: Close flushes them but does not close w.
func NewWriter(w io.Writer, tensors []TensorHeader, metadata map[string]string) (*Writer, error) {
	e, err := encodeHeader("", tensors, metadata)
	if err != nil {
		return nil, err
	}
	sw := newWriter("", w, e)
	return sw, sw.err
}

// Create is NewWriter into a new file at path. The bytes go to a temporary
// file in the same folder, which Close renames to path once every declared
// byte is in it; Abort, or a failed Close, removes it, so path never holds a
// partial file. Callers should defer Abort, which does nothing after Close.
func Create(path string, tensors []TensorHeader, metadata map[string]string) (*Writer, error) {
	e, err := encodeHeader(path, tensors, metadata)
	if err != nil {
		return nil, err
	}
	return createFile(path, e)
}

func newWriter(path string, w io.Writer, e *encoded) *Writer {
	sw := &Writer{path: path, bw: bufio.NewWriterSize(w, 1<<20), enc: e}
	var n [lengthSize]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(e.header)))
	sw.bw.Write(n[:])
	if _, err := sw.bw.Write(e.header); err != nil { // bufio.Writer keeps the first error
		sw.err = sw.ioError(err)
	}
	return sw
}

func createFile(path string, e *encoded) (*Writer, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	w := newWriter(path, f, e)
	w.file = f
	if w.err != nil {
		w.Abort()
		return nil, w.err
	}
	return w, nil
}

// Order returns the indices of the tensors given to NewWriter or Create in
// the order their bytes must be written.
func (w *Writer) Order() []int { return slices.Clone(w.enc.order) }

// Size returns the number of data bytes the header declares: the file is
// that many bytes longer than its header.
func (w *Writer) Size() uint64 { return w.enc.total }

// Write writes the next bytes of tensor data. Writing more bytes than the
// header declares is an error, and so is any write after Close or Abort.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err == nil && w.done {
		w.err = errors.New("loader: write to a closed safetensors writer")
	}
	if w.err != nil {
		return 0, w.err
	}
	if left := w.enc.total - w.n; uint64(len(p)) > left {
		last := ""
		if k := len(w.enc.order); k > 0 {
			last = w.enc.tensors[w.enc.order[k-1]].Name
		}
		w.err = w.invalid(last, "%d bytes written past the end of the data section, which the header makes %d bytes long", uint64(len(p))-left, w.enc.total)
		return 0, w.err
	}
	n, err := w.bw.Write(p)
	w.n += uint64(n)
	if err != nil {
		w.err = w.ioError(err)
	}
	return n, w.err
}

// Close checks that every byte the header declares was written and flushes
// the file; Create's temporary file is then closed and renamed into place,
// or removed if anything failed.
func (w *Writer) Close() error {
	if w.done {
		return w.err
	}
	w.done = true
	if w.err == nil && w.n < w.enc.total {
		w.err = w.incomplete()
	}
	if w.err == nil {
		if err := w.bw.Flush(); err != nil {
			w.err = w.ioError(err)
		}
	}
	if w.file == nil {
		return w.err
	}
	f := w.file
	w.file = nil
	if w.err == nil {
		// CreateTemp makes the file readable by its owner only; a
		// checkpoint gets the mode os.WriteFile(path, b, 0o644) would give.
		w.err = f.Chmod(0o644)
	}
	if err := f.Close(); err != nil && w.err == nil {
		w.err = w.ioError(err)
	}
	if w.err == nil {
		w.err = os.Rename(f.Name(), w.path)
	}
	if w.err != nil {
		os.Remove(f.Name())
	}
	return w.err
}

// Abort gives up on the file: Create's temporary file is closed and
// removed, and nothing more can be written. It does nothing after Close.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	if w.file != nil {
		w.file.Close()
		os.Remove(w.file.Name())
		w.file = nil
	}
}

// incomplete is the error for a data section that stopped short: it names
// the first tensor whose bytes are missing.
func (w *Writer) incomplete() error {
	var begin uint64
	for _, i := range w.enc.order {
		end := begin + w.enc.sizes[i]
		if w.n < end {
			return w.invalid(w.enc.tensors[i].Name, "closed after %d of its %d bytes (%d of the %d data bytes the header declares)", w.n-begin, end-begin, w.n, w.enc.total)
		}
		begin = end
	}
	panic("loader: incomplete called on a complete data section")
}

func (w *Writer) invalid(tensor, format string, args ...any) error {
	return &Error{File: w.path, Tensor: tensor, Kind: ErrInvalidTensor, Detail: fmt.Sprintf(format, args...)}
}

func (w *Writer) ioError(err error) error {
	if w.path == "" {
		return fmt.Errorf("loader: writing: %w", err)
	}
	return fmt.Errorf("loader: writing %s: %w", w.path, err)
}

// encoded is a checked header, ready to write.
type encoded struct {
	header  []byte         // the JSON, padded
	tensors []TensorHeader // as the caller gave them
	sizes   []uint64       // each tensor's bytes, by the caller's index
	order   []int          // the caller's indices in file order
	total   uint64         // bytes of the data section
}

// encodeTensors is encodeHeader for tensors that carry their bytes, also
// checking that each holds exactly what its shape and dtype need.
func encodeTensors(path string, tensors []Tensor, metadata map[string]string) (*encoded, error) {
	hs := make([]TensorHeader, len(tensors))
	for i, t := range tensors {
		hs[i] = TensorHeader{Name: t.Name, DType: t.DType, Shape: t.Shape}
	}
	e, err := encodeHeader(path, hs, metadata)
	if err != nil {
		return nil, err
	}
	for i, t := range tensors {
		if want := e.sizes[i]; uint64(len(t.Data)) != want {
			return nil, &Error{File: path, Tensor: t.Name, Kind: ErrInvalidTensor,
				Detail: fmt.Sprintf("data holds %d bytes but shape %s of %s needs %d", len(t.Data), formatShape(t.Shape), t.DType, want)}
		}
	}
	return e, nil
}

// encodeHeader checks the tensors and metadata and lays the file out.
func encodeHeader(path string, tensors []TensorHeader, metadata map[string]string) (*encoded, error) {
	bad := func(name, format string, args ...any) error {
		return &Error{File: path, Tensor: name, Kind: ErrInvalidTensor, Detail: fmt.Sprintf(format, args...)}
	}
	sizes := make([]uint64, len(tensors))
	seen := make(map[string]bool, len(tensors))
	for i, t := range tensors {
		switch {
		case !utf8.ValidString(t.Name):
			return nil, bad(t.Name, "name is not valid UTF-8")
		case t.Name == metadataKey:
			return nil, bad(t.Name, "the name %s is reserved for the metadata map", metadataKey)
		case seen[t.Name]:
			return nil, bad(t.Name, "name given twice")
		case !t.DType.Valid():
			return nil, bad(t.Name, "invalid dtype %v", t.DType)
		}
		seen[t.Name] = true
		size, err := byteSize(t.DType, t.Shape)
		if err != nil {
			return nil, bad(t.Name, "%v", err)
		}
		sizes[i] = size
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, bad("", "metadata entry %q is not valid UTF-8", k)
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
		end, ok := addUint64(offset, sizes[idx])
		if !ok {
			return nil, bad(t.Name, "the data section would pass 2^64 bytes")
		}
		offset = end
		h = strconv.AppendUint(h, offset, 10)
		h = append(h, "]}"...)
	}
	h = append(h, '}')
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	if len(h) > MaxHeaderSize {
		return nil, &Error{File: path, Kind: ErrHeaderTooLarge,
			Detail: fmt.Sprintf("header would be %d bytes, over the 100 MB limit readers enforce: split the tensors over several shards", len(h))}
	}
	return &encoded{header: h, tensors: tensors, sizes: sizes, order: order, total: offset}, nil
}

// addUint64 returns a+b and whether it did not overflow.
func addUint64(a, b uint64) (uint64, bool) {
	s := a + b
	return s, s >= a
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
