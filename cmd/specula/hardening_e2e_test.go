package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/plugins/sdk"
	"github.com/specula-dev/specula/plugins/sdk/plugintest"
)

// End-to-end tests of the program's contract under faults, through the
// built binary: Ctrl-C (SIGINT) exits 130 and SIGTERM 143 in every mode,
// printing what was generated; a frozen plugin, a plugin that never
// completes its handshake, or a garbage one never hangs specula or leaves
// a process or a socket behind; --no-draft runs the target alone whatever
// state the draft is in.
//
// Bounds on how long something takes are liveness checks (a hang is the
// bug), set far above the time the operation needs.

// socketTmp gives specula (and its plugins) a private folder for plugin
// sockets, so that the test sees exactly the sockets it makes. It returns
// the environment and the socket folder. (The folder is $XDG_RUNTIME_DIR,
// which specula prefers to $TMPDIR when it is short: moving $TMPDIR would
// make MLX build its CPU kernels again, which it keeps there.)
func socketTmp(t *testing.T) (env []string, dir string) {
	t.Helper()
	base, err := os.MkdirTemp("", "spx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	return []string{"XDG_RUNTIME_DIR=" + base}, filepath.Join(base, "specula-"+strconv.Itoa(os.Getuid()))
}

// noSocketLeft fails the test if a plugin socket is left in dir.
func noSocketLeft(t *testing.T, dir string) {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(dir, "plugin*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("plugin sockets left behind: %v", left)
	}
}

// started is a specula process whose output is being read.
type started struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr *bytes.Buffer
	done   chan error
}

// start starts cmd, reading its stdout through a buffer the test can wait
// on and collecting its stderr.
func start(t *testing.T, cmd *exec.Cmd) *started {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &started{cmd: cmd, stdout: bufio.NewReader(out), stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return s
}

// firstToken waits until a streaming run has printed a token (and the
// separator before the next) and returns what it read.
func (s *started) firstToken(t *testing.T) string {
	t.Helper()
	first, err := s.stdout.ReadString(' ')
	if err != nil {
		t.Fatalf("no tokens streamed: %v\n%s", err, s.stderr)
	}
	return first
}

// wait reads the rest of stdout and waits up to limit for the exit; it
// returns the rest of stdout and the exit code.
func (s *started) wait(t *testing.T, limit time.Duration) (string, int) {
	t.Helper()
	var rest bytes.Buffer
	go func() {
		_, _ = io.Copy(&rest, s.stdout)
		s.done <- s.cmd.Wait()
	}()
	select {
	case err := <-s.done:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return rest.String(), code
	case <-time.After(limit):
		_ = s.cmd.Process.Kill()
		t.Fatalf("specula did not exit within %v\n%s", limit, s.stderr)
	}
	return "", 0
}

// runJSONOut is the part of run --json's output these tests read.
type runJSONOut struct {
	IDs        []int32 `json:"ids"`
	DoneReason string  `json:"done_reason"`
	Stats      struct {
		Fallbacks map[string]int `json:"fallbacks"`
	} `json:"stats"`
}

// TestE2EInterrupted: Ctrl-C during generation exits 130 (SIGTERM 143) in
// every output mode, with what was generated printed as usual and marked
// interrupted; bench too.
func TestE2EInterrupted(t *testing.T) {
	prompt, greedy := fixturePrompt(t)
	manifest := fixtureManifest(t, "dflash-tiny")
	run := []string{"run", "-m", manifest, "--ids", joinIDs(prompt), "--max-tokens", "4000"}
	for _, c := range []struct {
		name string
		args []string
		sig  syscall.Signal
		code int
	}{
		{"streaming", nil, syscall.SIGINT, 130},
		{"streaming, SIGTERM", nil, syscall.SIGTERM, 143},
		{"quiet", []string{"--quiet"}, syscall.SIGINT, 130},
		{"json", []string{"--json"}, syscall.SIGINT, 130},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := start(t, pluginCommand(t, nil, append(slices.Clone(run), c.args...)...))
			asJSON := slices.Contains(c.args, "--json")
			if asJSON {
				// Nothing streams: interrupt once the target is loaded.
				for !strings.Contains(s.stderr.String(), "loaded target weights") {
					time.Sleep(20 * time.Millisecond)
				}
				time.Sleep(200 * time.Millisecond)
			} else {
				s.firstToken(t)
			}
			if err := s.cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			stdout, code := s.wait(t, 30*time.Second)
			stderr := s.stderr.String()
			if code != c.code {
				t.Fatalf("exit %d; want %d\n%s", code, c.code, stderr)
			}
			switch {
			case asJSON:
				var out runJSONOut
				if err := jsonUnmarshal(stdout, &out); err != nil {
					t.Fatalf("--json printed %q: %v", stdout, err)
				}
				n := min(len(out.IDs), len(greedy))
				if out.DoneReason != "interrupted" || !slices.Equal(out.IDs[:n], greedy[:n]) {
					t.Fatalf("done_reason %q, ids %v; want \"interrupted\" and a prefix of the greedy %v", out.DoneReason, out.IDs, greedy)
				}
			case slices.Contains(c.args, "--quiet"):
				if stderr != "" {
					t.Fatalf("--quiet printed on stderr: %q", stderr)
				}
			default:
				if !strings.Contains(stderr, "tokens,") || !strings.HasSuffix(strings.TrimSpace(stderr), "(interrupted)") {
					t.Fatalf("stats line does not say interrupted:\n%s", stderr)
				}
			}
		})
	}
	t.Run("bench", func(t *testing.T) {
		s := start(t, pluginCommand(t, nil, "bench", "-m", manifest, "--repeats", "1000", "--max-tokens", "64"))
		for !strings.Contains(s.stderr.String(), "loaded target weights") {
			time.Sleep(20 * time.Millisecond)
		}
		if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		_, code := s.wait(t, 30*time.Second)
		if stderr := s.stderr.String(); code != 130 || !strings.Contains(stderr, "specula bench: interrupted") || strings.Contains(stderr, "context canceled") {
			t.Fatalf("exit %d; want 130 and \"interrupted\"\n%s", code, stderr)
		}
	})
}

// jsonUnmarshal decodes the one JSON value in s.
func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// TestE2EPluginFrozen: a plugin stopped with SIGSTOP mid-run misses its
// deadline; specula finishes by plain decoding — the same tokens as
// --no-draft — and exits 0 within 20 s of the stop, leaving no plugin
// process and no socket (a stale socket from an earlier crash is cleaned up
// too).
func TestE2EPluginFrozen(t *testing.T) {
	bin, manifest, prompt, _ := pluginSetup(t)
	env, sockets := socketTmp(t)
	stale := staleSocket(t, sockets)
	args := []string{"run", "-m", manifest, "--plugin-dir", bin.Dir, "--ids", joinIDs(prompt), "--max-tokens", "200"}
	s := start(t, pluginCommand(t, env, args...))
	first := s.firstToken(t)
	pids := plugintest.Running(t, bin.Path)
	if len(pids) != 1 {
		t.Fatalf("plugin processes %v while generating; want one", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rest, code := s.wait(t, 20*time.Second)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, s.stderr)
	}
	if plugintest.Alive(pids[0]) {
		t.Fatalf("the frozen plugin %d outlived specula", pids[0])
	}
	noPluginLeft(t, bin)
	if !strings.Contains(s.stderr.String(), "reason=plugin-timeout") {
		t.Fatalf("the frozen plugin was not reported as timed out:\n%s", s.stderr)
	}
	plain, stderr, code := runPluginCommand(t, env, append(args, "--no-draft")...)
	if code != 0 {
		t.Fatalf("--no-draft: exit %d\n%s", code, stderr)
	}
	got := strings.Fields(first + rest)
	if want := strings.Fields(plain); !slices.Equal(got, want) || len(want) != 200 {
		t.Fatalf("tokens with the frozen plugin:\n%v\n--no-draft:\n%v", got, want)
	}
	noSocketLeft(t, sockets)
	if _, err := os.Lstat(stale); err == nil {
		t.Fatalf("the stale socket %s was not removed", stale)
	}
}

// staleSocket leaves a socket nothing listens on in dir, dated an hour ago,
// as a killed plugin leaves it.
func staleSocket(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "plugin123456789")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakePlugin installs a shell script as plugin dflash v0.1.0 in a fresh
// plugin folder and returns the folder and a manifest naming it over the
// fixture pair.
func fakePlugin(t *testing.T, script string) (dir, manifest string) {
	t.Helper()
	dir = t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := sdk.FileName{Name: "dflash", Version: "0.1.0", APIMajor: sdk.APIMajor, APIMinor: sdk.APIMinor, OS: runtime.GOOS, Arch: runtime.GOARCH}
	path := filepath.Join(dir, name.String())
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(script))
	digest := hex.EncodeToString(sum[:])
	if err := os.WriteFile(path+sdk.ChecksumSuffix, []byte(digest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, pluginManifest(t, fixtures.Dir(t, "dflash-tiny"), "dflash", digest)
}

// pluginManifest writes a greedy manifest over the fixture target and the
// draft folder draft, served by plugin (none when "").
func pluginManifest(t *testing.T, draft, plugin, digest string) string {
	t.Helper()
	served := ""
	if plugin != "" {
		served = fmt.Sprintf("plugin = %q\nsha256 = %q\n", plugin, digest)
	}
	text := fmt.Sprintf(`schema = 1
name = "hardening-e2e"
[target]
path = %q
capabilities = ["model", "draft-target"]
dtype = "float32"
[draft]
path = %q
capabilities = ["draft", "block-draft"]
%s[sampling]
temperature = 0.0
max_tokens = 32
`, fixtures.Dir(t, "qwen35-tiny"), draft, served)
	path := filepath.Join(t.TempDir(), "m.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestE2EPluginNeverHandshakes: a plugin binary that never completes the
// handshake does not hold specula up: Ctrl-C ends run within 2 s with 130
// (SIGTERM: 143), and the binary is gone.
func TestE2EPluginNeverHandshakes(t *testing.T) {
	for _, c := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(c.sig.String(), func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			dir, manifest := fakePlugin(t, fmt.Sprintf("#!/bin/sh\necho $$ > %s\nexec sleep 300\n", pidFile))
			env, sockets := socketTmp(t)
			s := start(t, pluginCommand(t, env, "run", "-m", manifest, "--plugin-dir", dir, "--ids", "1,2,3"))
			pid := 0
			deadline := time.Now().Add(30 * time.Second)
			for pid == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the plugin binary did not start\n%s", s.stderr)
				}
				time.Sleep(20 * time.Millisecond)
				b, _ := os.ReadFile(pidFile)
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			}
			if err := s.cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			_, code := s.wait(t, 2*time.Second)
			if code != c.code {
				t.Fatalf("exit %d; want %d\n%s", code, c.code, s.stderr)
			}
			if plugintest.Alive(pid) {
				t.Fatalf("the plugin binary %d outlived specula", pid)
			}
			noSocketLeft(t, sockets)
		})
	}
}

// TestE2ENoDraft: a draft that cannot load (a plugin that prints garbage, a
// built-in draft whose weights are truncated) fails run with a message that
// says --no-draft runs the target alone; with --no-draft the run succeeds
// with the target's greedy tokens.
func TestE2ENoDraft(t *testing.T) {
	prompt, greedy := fixturePrompt(t)
	garbageDir, garbage := fakePlugin(t, "#!/bin/sh\necho garbage\n")
	truncated := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(fixtures.Dir(t, "dflash-tiny"), f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "model.safetensors" {
			b = b[:len(b)/2]
		}
		if err := os.WriteFile(filepath.Join(truncated, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env, sockets := socketTmp(t)
	for _, c := range []struct{ name, manifest, want string }{
		{"garbage plugin", garbage, `printed "garbage" on stdout instead of the go-plugin handshake`},
		{"truncated built-in draft", pluginManifest(t, truncated, "", ""), "model.safetensors"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"run", "-m", c.manifest, "--plugin-dir", garbageDir, "--ids", joinIDs(prompt), "--json", "--quiet"}
			_, stderr, code := runPluginCommand(t, env, args...)
			if code != exitFailure || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "--no-draft runs the target alone") || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d; want 1 and one line naming the problem and --no-draft:\n%s", code, stderr)
			}
			stdout, stderr, code := runPluginCommand(t, env, append(args, "--no-draft")...)
			if code != 0 {
				t.Fatalf("--no-draft: exit %d\n%s", code, stderr)
			}
			var out runJSONOut
			if err := jsonUnmarshal(stdout, &out); err != nil {
				t.Fatalf("%v: %s", err, stdout)
			}
			if !slices.Equal(out.IDs, greedy) || out.Stats.Fallbacks["no-draft"] == 0 {
				t.Fatalf("--no-draft ids %v (fallbacks %v); want the reference greedy %v", out.IDs, out.Stats.Fallbacks, greedy)
			}
		})
	}
	noSocketLeft(t, sockets)
}
