//go:build unix

package distributed_test

import (
	"syscall"
	"testing"
)

// reservePort binds a TCP socket to 127.0.0.1:port without listening,
// until the test ends: a dial there is refused, as at a port nothing
// uses, and no other program can listen there meanwhile (the socket does
// not share its address), such as another package's test that picked the
// same free port. It reports false where the port is taken already.
func reservePort(t *testing.T, port int) bool {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("a socket to hold port %d: %v", port, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return false
	}
	t.Cleanup(func() { syscall.Close(fd) })
	return true
}
