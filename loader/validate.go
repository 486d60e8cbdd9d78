package loader

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"
)

// MaxHeaderSize is the largest header, in bytes, that the reader accepts and
// the writer produces (rule 2). The limit is the reference crate's: it is far
// above any real header (a few MB for tens of thousands of tensors) and keeps
// a corrupt length field from sizing a huge allocation.
const MaxHeaderSize = 100_000_000

// lengthSize is the size of the little-endian header length N at the start
// of every file.
const lengthSize = 8

// layout is the validated content of a header.
type layout struct {
	headerLen uint64
	metadata  map[string]string
	tensors   []TensorInfo
}

// prefixSize is how many leading bytes are read for the signature checks:
// enough for the Git LFS pointer's first line.
const prefixSize = 64

// decode validates the safetensors file of the given size read through r,
// applying the rules of spec/safetensors.md section 3 in order, and the
// section 7 signature checks before rule 2. It reads the first bytes and
// the header only, and allocates nothing in proportion to the header length
// before rules 2 and 3 have bounded it by the file size.
func decode(path string, r io.ReaderAt, size int64) (*layout, error) {
	if size == 0 {
		return nil, &Error{File: path, Kind: ErrEmpty, Detail: "file is empty (0 bytes): the download or copy failed; download it again"}
	}
	prefix := make([]byte, min(size, prefixSize))
	if err := readFull(r, prefix, 0); err != nil {
		return nil, fmt.Errorf("loader: reading %s: %w", path, err)
	}
	if size < lengthSize { // rule 1
		if err := signature(path, size, prefix); err != nil {
			return nil, err
		}
		return nil, &Error{File: path, Kind: ErrHeaderTooSmall,
			Detail: fmt.Sprintf("file is %d bytes, shorter than the 8-byte header length: truncated or not a safetensors file", size)}
	}
	n := binary.LittleEndian.Uint64(prefix)
	// The signature checks only run for a file the length rules would
	// refuse, so a real file never gets a "looks like text" message.
	if n > MaxHeaderSize || n > uint64(size)-lengthSize {
		if err := signature(path, size, prefix); err != nil {
			return nil, err
		}
	}
	if n > MaxHeaderSize { // rule 2, before anything is sized by n
		return nil, &Error{File: path, Kind: ErrHeaderTooLarge,
			Detail: fmt.Sprintf("header length %d exceeds 100 MB: corrupt or not a safetensors file", n)}
	}
	if n > uint64(size)-lengthSize { // rule 3; n is small, so 8+n cannot overflow
		return nil, &Error{File: path, Kind: ErrInvalidHeaderLength,
			Detail: fmt.Sprintf("header length %d needs %d bytes but the file has %d: truncated download or not a safetensors file", n, n+lengthSize, size)}
	}
	hb := make([]byte, n) // n <= size-8: bounded by the real file
	if err := readFull(r, hb, lengthSize); err != nil {
		return nil, fmt.Errorf("loader: reading the header of %s: %w", path, err)
	}
	if !utf8.Valid(hb) { // rule 4
		return nil, &Error{File: path, Kind: ErrInvalidHeader,
			Detail: "header is not valid UTF-8: corrupt or not a safetensors file"}
	}
	if len(hb) == 0 || hb[0] != '{' { // rule 5
		return nil, &Error{File: path, Kind: ErrInvalidHeaderStart,
			Detail: "header does not start with '{': corrupt or not a safetensors file"}
	}
	h, err := parseHeader(path, hb) // rules 6 and 7
	if err != nil {
		return nil, err
	}
	dataLen := uint64(size) - lengthSize - n
	tensors, err := checkLayout(path, h.tensors, dataLen) // rules 8 to 12
	if err != nil {
		return nil, err
	}
	base := int64(lengthSize + n)
	out := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		// Defence in depth: rule 12 already bounds every END by dataLen.
		if t.end > dataLen || t.begin > t.end {
			return nil, &Error{File: path, Tensor: t.name, Kind: ErrOutOfBounds,
				Detail: fmt.Sprintf("data_offsets [%d, %d] lie outside the %d-byte data section", t.begin, t.end, dataLen)}
		}
		out[i] = TensorInfo{Name: t.name, DType: t.dtype, Shape: t.shape,
			Offset: base + int64(t.begin), Size: int64(t.end - t.begin), Path: path}
	}
	return &layout{headerLen: n, metadata: h.metadata, tensors: out}, nil
}

// checkLayout applies rules 8 to 12 to the decoded entries and returns them
// in file order. Ties (zero-size tensors sharing an offset) are ordered by
// name so that the order is deterministic.
func checkLayout(path string, ts []rawTensor, dataLen uint64) ([]rawTensor, error) {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b rawTensor) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end), cmp.Compare(a.name, b.name))
	})
	const fix = "the file is corrupt; download or export it again"
	var pos uint64 // end of the previous tensor
	prev := ""
	for _, t := range ts {
		e := &Error{File: path, Tensor: t.name}
		switch { // rule 8
		case t.end < t.begin:
			e.Kind, e.Detail = ErrInvalidOffset, fmt.Sprintf("data_offsets [%d, %d] end before they begin; %s", t.begin, t.end, fix)
		case t.begin > pos && prev == "":
			e.Kind, e.Detail = ErrInvalidOffset, fmt.Sprintf("data_offsets [%d, %d]: the first tensor must start at 0, leaving no gap; %s", t.begin, t.end, fix)
		case t.begin > pos:
			e.Kind, e.Detail = ErrInvalidOffset, fmt.Sprintf("data_offsets [%d, %d] leave a gap of %d bytes after tensor %q (which ends at %d); %s", t.begin, t.end, t.begin-pos, prev, pos, fix)
		case t.begin < pos:
			e.Kind, e.Detail = ErrInvalidOffset, fmt.Sprintf("data_offsets [%d, %d] overlap tensor %q (which ends at %d); %s", t.begin, t.end, prev, pos, fix)
		}
		if e.Kind != nil {
			return nil, e
		}
		pos, prev = t.end, t.name
		bits, ok := tensorBits(t.dtype, t.shape)
		if !ok { // rule 9
			e.Kind, e.Detail = ErrValidationOverflow, fmt.Sprintf("shape %s of %s overflows 64 bits; %s", formatShape(t.shape), t.dtype, fix)
			return nil, e
		}
		if bits%8 != 0 { // rule 10
			e.Kind, e.Detail = ErrMisalignedSlice, fmt.Sprintf("shape %s of %s is %d bits, not a whole number of bytes; %s", formatShape(t.shape), t.dtype, bits, fix)
			return nil, e
		}
		if t.end-t.begin != bits/8 { // rule 11
			e.Kind, e.Detail = ErrTensorInvalidInfo, fmt.Sprintf("data_offsets [%d, %d] hold %d bytes but shape %s of %s needs %d; %s", t.begin, t.end, t.end-t.begin, formatShape(t.shape), t.dtype, bits/8, fix)
			return nil, e
		}
	}
	switch { // rule 12
	case pos > dataLen:
		return nil, &Error{File: path, Kind: ErrMetadataIncompleteBuffer,
			Detail: fmt.Sprintf("file is truncated: the header needs %d bytes of tensor data, the file has %d; the download was probably interrupted: download it again", pos, dataLen)}
	case pos < dataLen:
		return nil, &Error{File: path, Kind: ErrMetadataIncompleteBuffer,
			Detail: fmt.Sprintf("%d trailing bytes after the last tensor's data (the header indexes %d of %d data bytes); %s", dataLen-pos, pos, dataLen, fix)}
	}
	return ts, nil
}

// signature recognises files that are not safetensors at all and names what
// they are (spec/safetensors.md section 7). It returns nil when the prefix
// looks like none of them.
func signature(path string, size int64, prefix []byte) error {
	if bytes.HasPrefix(prefix, []byte("version https://git-lfs.github.com/spec/")) {
		return &Error{File: path, Kind: ErrLFSPointer,
			Detail: fmt.Sprintf("Git LFS pointer (%d bytes), not weights: run `git lfs pull` or download with the Hugging Face CLI", size)}
	}
	// A real length field below 2^56 has a zero byte in its top byte; text
	// has none, which keeps a binary file from being called text.
	if bytes.IndexByte(prefix[:min(len(prefix), lengthSize)], 0) >= 0 {
		return nil
	}
	text := bytes.TrimLeft(bytes.TrimPrefix(prefix, []byte("\xef\xbb\xbf")), " \t\r\n")
	if len(text) == 0 {
		return nil
	}
	var what string
	switch text[0] {
	case '<':
		what = "HTML"
	case '{', '[':
		what = "JSON"
	default:
		return nil
	}
	return &Error{File: path, Kind: ErrNotSafetensors,
		Detail: fmt.Sprintf("not a safetensors file (looks like %s text, %d bytes): an error page or a metadata file saved in place of the weights; download it again", what, size)}
}

// readFull reads len(buf) bytes at off, treating a short read as
// io.ErrUnexpectedEOF. io.ReaderAt may return io.EOF with a full read.
func readFull(r io.ReaderAt, buf []byte, off int64) error {
	n, err := r.ReadAt(buf, off)
	if n == len(buf) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// tensorBits returns product(shape) × bits of the dtype, and false if that
// overflows uint64 (rule 9). The element count is formed first, as the
// reference crate does, so [2^64-1, 0] is an empty tensor, not an overflow.
func tensorBits(d DType, shape []uint64) (uint64, bool) {
	elems := uint64(1)
	for _, s := range shape {
		var ok bool
		if elems, ok = mulUint64(elems, s); !ok {
			return 0, false
		}
	}
	return mulUint64(elems, d.Bits())
}

// mulUint64 returns a*b and whether it did not overflow.
func mulUint64(a, b uint64) (uint64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	p := a * b
	return p, p/b == a
}

// formatShape writes a shape as [a, b, c].
func formatShape(s []uint64) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, d)
	}
	b.WriteByte(']')
	return b.String()
}
