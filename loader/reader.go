package loader

import (
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
)

// TensorInfo describes one tensor of a validated safetensors file.
type TensorInfo struct {
	Name  string
	DType DType
	// Shape holds the dimensions, outermost first; empty for a rank-0
	// tensor (one element). It is shared with the File: do not modify it.
	Shape []uint64
	// Offset is the absolute position of the tensor's first byte in the
	// file (8 + N + BEGIN), ready for ReadAt or an MLX loader.
	Offset int64
	// Size is the number of bytes (END − BEGIN), elements·bits/8.
	Size int64
	// Path is the file holding the tensor, as given to Open.
	Path string
}

// Elements returns the number of elements: the product of Shape, 1 for rank
// 0. It cannot overflow for a TensorInfo obtained from a validated file.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is an open, validated safetensors file. Its header has been checked
// against every rule of spec/safetensors.md section 3; its data section has
// not been read. The methods are safe for concurrent use.
type File struct {
	path     string
	f        *os.File
	size     int64
	metadata map[string]string
	tensors  []TensorInfo // file (offset) order
	byName   map[string]int

	mu     sync.Mutex
	closed bool
	mapped []byte // read-only mapping of the whole file, made on first Bytes
	mapErr error  // why mapping failed; Bytes then falls back to ReadAt
}

// Open opens and validates the safetensors file at path. It reads the 8-byte
// length and the header only. A file that breaks a rule gives an *Error
// whose Kind is the rule's sentinel (ErrInvalidOffset, ...); a file that is
// not safetensors at all (empty, a Git LFS pointer, an HTML or JSON page)
// gives ErrEmpty, ErrLFSPointer or ErrNotSafetensors.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &Error{File: path, Kind: ErrNotSafetensors,
			Detail: fmt.Sprintf("not a regular file (%s); pass a .safetensors file, or a checkpoint folder to OpenCheckpoint", st.Mode().Type())}
	}
	l, err := decode(path, f, st.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	file := &File{path: path, f: f, size: st.Size(), metadata: l.metadata, tensors: l.tensors,
		byName: make(map[string]int, len(l.tensors))}
	for i, t := range l.tensors {
		file.byName[t.Name] = i
	}
	return file, nil
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Size returns the file size in bytes at Open.
func (f *File) Size() int64 { return f.size }

// Tensors returns the tensors in file (offset) order. The slice is a copy;
// the Shape slices are shared.
func (f *File) Tensors() []TensorInfo { return slices.Clone(f.tensors) }

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}

// Metadata returns a copy of the header's __metadata__ map: nil when the
// header has none.
func (f *File) Metadata() map[string]string { return maps.Clone(f.metadata) }

// Reader returns a reader over the bytes of the tensor called name. It reads
// through the open file with ReadAt; it is valid until Close.
func (f *File) Reader(name string) (*io.SectionReader, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(f.f, t.Offset, t.Size), nil
}

// Bytes returns the bytes of the tensor called name. They come from a
// read-only shared mapping of the file, so no copy is made and pages are read
// on first touch; the slice must not be written to (that faults) and must not
// be used after Close. A checkpoint must not be rewritten or truncated while
// it is mapped: touching pages past a new end faults (SIGBUS). Where the file
// cannot be mapped, Bytes reads the tensor into a new slice instead.
func (f *File) Bytes(name string) ([]byte, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, &fs.PathError{Op: "read", Path: f.path, Err: os.ErrClosed}
	}
	if t.Size == 0 {
		return []byte{}, nil
	}
	if f.mapped == nil && f.mapErr == nil {
		f.mapped, f.mapErr = mmapFile(f.f, f.size)
		if f.mapErr != nil {
			slog.Debug("loader: mmap failed, reading tensors with ReadAt", "file", f.path, "err", f.mapErr)
		}
	}
	end := t.Offset + t.Size
	if f.mapped != nil {
		// Defence in depth: validation put every tensor inside the file,
		// but never slice a mapping without checking.
		if t.Offset < 0 || end > int64(len(f.mapped)) {
			return nil, f.outOfBounds(t)
		}
		return f.mapped[t.Offset:end:end], nil
	}
	buf := make([]byte, t.Size)
	if err := readFull(f.f, buf, t.Offset); err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, f.outOfBounds(t)
		}
		return nil, err
	}
	return buf, nil
}

func (f *File) outOfBounds(t TensorInfo) error {
	return &Error{File: f.path, Tensor: t.Name, Kind: ErrOutOfBounds,
		Detail: fmt.Sprintf("bytes [%d, %d) lie outside the file (it changed after it was opened?)", t.Offset, t.Offset+t.Size)}
}

func (f *File) lookup(name string) (TensorInfo, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return TensorInfo{}, &Error{File: f.path, Tensor: name, Kind: ErrTensorNotFound, Detail: "no such tensor in the header"}
	}
	return t, nil
}

// Close unmaps and closes the file. Slices returned by Bytes become invalid.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	var err error
	if f.mapped != nil {
		err = munmap(f.mapped)
		f.mapped = nil
	}
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	return err
}
