package plugins_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/registry"
)

// Shutting plugins down and starting them must end in bounded time whatever
// the plugin does: these tests give each a deadline far above what the
// operation takes (a fraction of a second to a few seconds) and far below
// the hangs they guard against (forever, or the 60 s start timeout).

// within runs f and fails the test if it has not returned after limit.
func within(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
	}
}

// logBuffer collects a logger's records.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startHelperLogged is startHelper with the host's records (at warn, as a
// user sees them) collected in the returned buffer and extra environment.
func startHelperLogged(t *testing.T, ctx context.Context, mode string, timeouts plugins.Timeouts, env ...string) (*plugins.Host, *registry.Registry, *logBuffer, error) {
	t.Helper()
	dir, digest := helperInstall(t)
	logs := &logBuffer{}
	h := plugins.NewHost(plugins.Config{
		Dirs:     []string{dir},
		Env:      append([]string{envHelper + "=1", envMode + "=" + mode}, env...),
		Timeouts: timeouts,
		Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	t.Cleanup(h.Close)
	reg := registry.New()
	return h, reg, logs, h.LoadPlugin(ctx, "helper", digest, reg)
}

// sockets lists the plugin sockets in the socket folder under base.
func sockets(t *testing.T, base string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(base, "specula-"+strconv.Itoa(os.Getuid()), "plugin*"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestSubprocessFrozen: a plugin stopped with SIGSTOP mid-request misses its
// deadline; the request ends with the plain output, and the frozen process
// is killed (it never answers the graceful shutdown) and its socket removed,
// both when it is retired and when the host closes.
func TestSubprocessFrozen(t *testing.T) {
	base := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", base)
	target := newTarget()
	want, _ := generate(t, target, nil, prompt, 40)
	for _, arch := range []string{"ChainSelector", "ChainDraft"} {
		t.Run(arch, func(t *testing.T) {
			h, reg, logs, err := startHelperLogged(t, context.Background(), "stop",
				plugins.Timeouts{Propose: 500 * time.Millisecond, Committed: 500 * time.Millisecond, Settle: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			d := drafter(t, reg, arch, target)
			pid := d.PID()
			if len(sockets(t, base)) != 1 {
				t.Fatalf("sockets %v; want the running plugin's", sockets(t, base))
			}
			got, st := generate(t, target, d, prompt, 40)
			if !slices.Equal(got.Tokens, want.Tokens) || got.Reason != want.Reason {
				t.Fatalf("with a frozen plugin %v (%s), plain %v (%s)", got.Tokens, got.Reason, want.Tokens, want.Reason)
			}
			if st.Fallback[plugins.FaultTimeout] == 0 {
				t.Fatalf("stats fallbacks %v do not name %s", st.Fallback, plugins.FaultTimeout)
			}
			within(t, 15*time.Second, "closing the host", h.Close)
			waitGone(t, pid)
			if s := sockets(t, base); len(s) != 0 {
				t.Fatalf("sockets left after the host closed: %v", s)
			}
			if strings.Contains(logs.String(), "level=ERROR") {
				t.Fatalf("errors logged for a retired plugin:\n%s", logs)
			}
		})
	}
}

// TestSubprocessCloseWhileFrozen: closing the host while the plugin is
// frozen, before any deadline retired it, ends it within the grace.
func TestSubprocessCloseWhileFrozen(t *testing.T) {
	h, reg, _, err := startHelperLogged(t, context.Background(), "", plugins.Timeouts{})
	if err != nil {
		t.Fatal(err)
	}
	d := drafter(t, reg, "ChainDraft", newTarget())
	pid := d.PID()
	if err := stopProcess(pid); err != nil {
		t.Fatal(err)
	}
	within(t, 15*time.Second, "closing the host", h.Close)
	waitGone(t, pid)
}

// TestSubprocessStartCancelled: a binary that never completes the handshake
// is killed as soon as the start is cancelled (Ctrl-C) or the host closes,
// long before the start timeout.
func TestSubprocessStartCancelled(t *testing.T) {
	for _, how := range []string{"context", "close"} {
		t.Run(how, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			dir, digest := helperInstall(t)
			h := plugins.NewHost(plugins.Config{Dirs: []string{dir},
				Env: []string{envHelper + "=1", envMode + "=nohandshake", envPIDFile + "=" + pidFile}})
			defer h.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				// Once the binary runs, interrupt the start.
				pid := 0
				for pid == 0 {
					time.Sleep(20 * time.Millisecond)
					b, _ := os.ReadFile(pidFile)
					pid, _ = strconv.Atoi(string(b))
				}
				if how == "context" {
					cancel()
				} else {
					h.Close()
				}
			}()
			var err error
			within(t, 20*time.Second, "LoadPlugin", func() { err = h.LoadPlugin(ctx, "helper", digest, registry.New()) })
			if err == nil || !strings.Contains(err.Error(), "start interrupted") {
				t.Fatalf("err = %v; want the start interrupted", err)
			}
			if how == "context" && !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v does not wrap context.Canceled", err)
			}
			b, _ := os.ReadFile(pidFile)
			p, _ := strconv.Atoi(string(b))
			waitGone(t, p)
		})
	}
}

// TestSubprocessPanic: a plugin that panics mid-request ends that request by
// plain decoding, and the user sees one warning with the panic's value, not
// its goroutine trace.
func TestSubprocessPanic(t *testing.T) {
	target := newTarget()
	want, _ := generate(t, target, nil, prompt, 40)
	_, reg, logs, err := startHelperLogged(t, context.Background(), "panic", plugins.Timeouts{})
	if err != nil {
		t.Fatal(err)
	}
	d := drafter(t, reg, "ChainSelector", target)
	pid := d.PID()
	got, st := generate(t, target, d, prompt, 40)
	if !slices.Equal(got.Tokens, want.Tokens) || st.Fallback[plugins.FaultCrash] == 0 {
		t.Fatalf("tokens %v (plain %v), fallbacks %v", got.Tokens, want.Tokens, st.Fallback)
	}
	waitGone(t, pid)
	out := logs.String()
	t.Log(out)
	if n := strings.Count(out, "plugin panicked"); n != 1 || !strings.Contains(out, "the frobnicator overflowed") {
		t.Fatalf("%d panic warnings (want one, with the value):\n%s", n, out)
	}
	if strings.Contains(out, "goroutine ") || strings.Contains(out, ".go:") {
		t.Fatalf("the panic's trace reached the warn log:\n%s", out)
	}
	if strings.Contains(out, "plugin process exited") {
		t.Fatalf("go-plugin's own records reached the warn log:\n%s", out)
	}
}

// stopProcess freezes process pid, as kill -STOP does.
func stopProcess(pid int) error { return syscall.Kill(pid, syscall.SIGSTOP) }
