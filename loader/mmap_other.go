//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package loader

import (
	"errors"
	"os"
)

// mmapFile is not available here; File.Bytes falls back to ReadAt.
func mmapFile(*os.File, int64) ([]byte, error) {
	return nil, errors.New("mmap is not supported on this platform")
}

func munmap([]byte) error { return nil }
