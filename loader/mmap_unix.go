//go:build linux || darwin || freebsd || netbsd || openbsd

package loader

import (
	"fmt"
	"math"
	"os"
	"syscall"
)

// mmapFile maps size bytes of f read-only and shared: pages come from the
// page cache on demand and are never written (spec/safetensors.md section 6).
func mmapFile(f *os.File, size int64) ([]byte, error) {
	if size <= 0 || size > math.MaxInt {
		return nil, fmt.Errorf("cannot map %d bytes", size)
	}
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
}

func munmap(b []byte) error { return syscall.Munmap(b) }
