package plugins

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// listen makes a Unix socket at path. Closing the listener removes the file
// unless SetUnlinkOnClose(false) (then it is left as a killed process
// leaves it).
func listen(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRemoveStaleSockets: sockets nothing listens on are removed once they
// are old enough; live ones, young ones and other files are kept.
func TestRemoveStaleSockets(t *testing.T) {
	dir, err := os.MkdirTemp("", "spx")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	old := time.Now().Add(-time.Hour)
	path := func(name string) string { return filepath.Join(dir, name) }

	dead := listen(t, path("plugin1"))
	dead.SetUnlinkOnClose(false)
	dead.Close()
	young := listen(t, path("plugin2"))
	young.SetUnlinkOnClose(false)
	young.Close()
	live := listen(t, path("plugin3"))
	defer live.Close()
	other := listen(t, path("other1"))
	other.SetUnlinkOnClose(false)
	other.Close()
	if err := os.WriteFile(path("plugin4"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"plugin1", "plugin3", "other1", "plugin4"} {
		if err := os.Chtimes(path(n), old, old); err != nil {
			t.Fatal(err)
		}
	}

	removed := removeStaleSockets(dir, time.Now().Add(-staleAge))
	if !slices.Equal(removed, []string{path("plugin1")}) {
		t.Fatalf("removed %v; want only the old socket without a listener", removed)
	}
	for _, n := range []string{"plugin2", "plugin3", "other1", "plugin4"} {
		if _, err := os.Lstat(path(n)); err != nil {
			t.Fatalf("%s was removed: %v", n, err)
		}
	}
}
