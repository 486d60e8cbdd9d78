package loader

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkOpen measures Open on a file with many small tensors: reading the
// header, the token-level JSON walk and rules 1 to 12. The data section is
// never touched. 10,000 tensors is the scale of a large sharded checkpoint's
// biggest header.
func BenchmarkOpen(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("tensors=%d", n), func(b *testing.B) {
			tensors := make([]Tensor, n)
			for i := range tensors {
				tensors[i] = Tensor{Name: fmt.Sprintf("model.layers.%d.mlp.down_proj.weight", i), DType: BF16, Shape: []uint64{4, 2}, Data: make([]byte, 16)}
			}
			p := filepath.Join(b.TempDir(), "m.safetensors")
			if err := WriteFile(p, tensors, map[string]string{"format": "pt"}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				f, err := Open(p)
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}
