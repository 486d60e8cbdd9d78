//go:build unix

package sdk

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// guardStdout points file descriptor 1 (and os.Stdout) at a pipe that the
// SDK reads. The first line must be go-plugin's handshake, which is passed
// on to the real stdout; anything else before it — a dependency printing a
// banner — ends the plugin with a message on stderr, since the host could
// not parse it ("Unrecognized remote plugin message"). After the handshake,
// what reaches descriptor 1 (C code printing) is logged on stderr; Go's
// os.Stdout and os.Stderr are by then go-plugin's stdio stream, which the
// host logs.
func guardStdout(stderr *os.File) error {
	realFD, err := unix.Dup(1)
	if err != nil {
		return err
	}
	real := os.NewFile(uintptr(realFD), "stdout")
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	if err := unix.Dup2(int(w.Fd()), 1); err != nil {
		return err
	}
	os.Stdout = w
	go func() {
		br := bufio.NewReader(r)
		line, err := br.ReadString('\n')
		if !isHandshake(line) {
			if err != nil && line == "" {
				return
			}
			logLine(stderr, "error", fmt.Sprintf("plugin wrote to stdout before its handshake: %q; stdout is reserved for the go-plugin handshake, log to stderr (slog) instead", strings.TrimSpace(line)))
			os.Exit(1)
		}
		_, _ = io.WriteString(real, line)
		_ = real.Close()
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				logLine(stderr, "warn", fmt.Sprintf("plugin wrote to stdout (discarded): %q", strings.TrimSpace(line)))
			}
			if err != nil {
				return
			}
		}
	}()
	return nil
}

// isHandshake reports whether line looks like go-plugin's handshake:
// CORE|APP|NETWORK|ADDRESS|PROTOCOL[|CERT].
func isHandshake(line string) bool {
	parts := strings.Split(strings.TrimSpace(line), "|")
	return len(parts) >= 5 && parts[0] == "1" && (parts[2] == "unix" || parts[2] == "tcp")
}

// logLine writes one hclog-style JSON record.
func logLine(w io.Writer, level, msg string) {
	b, _ := json.Marshal(map[string]string{"@level": level, "@message": msg, "@timestamp": time.Now().Format(jsonTimeFormat)})
	_, _ = w.Write(append(b, '\n'))
}
