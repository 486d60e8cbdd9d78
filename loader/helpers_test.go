package loader

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stFile assembles a safetensors file at the byte level: the header padded
// with spaces to a multiple of 8, its length, then data bytes of value 0xAB.
// Builders never validate, so they can make every kind of malformed file.
func stFile(header string, data int) []byte {
	for len(header)%8 != 0 {
		header += " "
	}
	return rawFile(uint64(len(header)), header, data)
}

// rawFile is stFile without padding and with any length field n.
func rawFile(n uint64, header string, data int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, n)
	b = append(b, header...)
	return append(b, []byte(strings.Repeat("\xab", data))...)
}

// writeFile writes b to name inside dir and returns its path.
func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeST writes a valid safetensors file with our writer and returns its path.
func writeST(t testing.TB, dir, name string, tensors []Tensor, meta map[string]string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, tensors, meta); err != nil {
		t.Fatal(err)
	}
	return p
}

// f32 returns a float32 tensor of the given shape with bytes 0, 1, 2, ...
func f32(name string, shape ...uint64) Tensor {
	n := uint64(4)
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i)
	}
	return Tensor{Name: name, DType: F32, Shape: shape, Data: data}
}
