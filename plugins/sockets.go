package plugins

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Plugins serve gRPC on Unix sockets in one short per-user folder (go-plugin
// names them plugin<digits>). A plugin that exits normally removes its
// socket; one that is killed (by its host, the kernel or a user) leaves it
// behind. The host removes the socket of every plugin it ends, and the first
// launch of a program removes the stale sockets earlier programs left.

// maxSocketDir bounds the socket folder's length: Unix socket paths are
// limited to 104 bytes on macOS (108 on Linux), and go-plugin adds
// "/plugin" and up to ten digits.
const maxSocketDir = 104 - len("/plugin") - 10 - 1

// staleAge is how old a socket without a listener must be before it counts
// as stale: a plugin starting right now binds its socket a moment before
// it listens on it, and that socket must not be taken for a dead one.
const staleAge = 10 * time.Second

// socketDir returns a short per-user folder for the plugins' Unix sockets,
// made if needed with mode 0700. The first call in a program removes the
// stale sockets in it.
func socketDir() (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" || len(base) > maxSocketDir/2 {
		base = os.TempDir()
	}
	dir := filepath.Join(base, fmt.Sprintf("specula-%d", os.Getuid()))
	if len(dir) > maxSocketDir {
		dir = fmt.Sprintf("/tmp/specula-%d", os.Getuid())
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("plugin socket folder %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("plugin socket folder %s has mode %v; other users must not reach it (chmod 700 it)", dir, st.Mode().Perm())
	}
	cleanOnce.Do(func() { removeStaleSockets(dir, time.Now().Add(-staleAge)) })
	return dir, nil
}

var cleanOnce sync.Once

// removeStaleSockets removes the plugin sockets in dir that are older than
// before and that nothing listens on (connecting is refused). The sockets of
// running plugins (other programs' included, even stopped ones: the kernel
// still queues connections for them) are kept. It returns the removed paths.
func removeStaleSockets(dir string, before time.Time) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 || !strings.HasPrefix(e.Name(), "plugin") {
			continue
		}
		info, err := e.Info()
		if err != nil || info.ModTime().After(before) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			continue
		}
		if os.Remove(path) == nil {
			removed = append(removed, path)
		}
	}
	return removed
}
