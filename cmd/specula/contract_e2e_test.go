package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/internal/fixtures"
)

// The README's contract for every command, through the built binary: a
// failure exits 1 with one line on stderr, "specula <command>: <why>";
// with --json a failure prints nothing on stdout or one JSON object whose
// "ok" is false, never a partial or malformed result. (Usage errors, exit 2,
// are TestE2EHelpAndBadFlags'; interruptions, 130 and 143, are
// TestE2EInterrupted's and TestE2EInterruptedWritesLeaveNothing's.)
func TestE2ECommandFailuresAreOneLine(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	notFolder := filepath.Join(fixtures.Dir(t, "qwen35-tiny"), "config.json", "x") // below a file
	fails := map[string][]string{
		"bench":    {"-m", missing + ".toml"},
		"check":    {missing + ".toml"},
		"compare":  {missing + "-a.safetensors", missing + "-b.safetensors"},
		"demo":     {"--dir", notFolder},
		"forward":  {"--model", missing, "--ids", "1", "--out", filepath.Join(t.TempDir(), "o.safetensors")},
		"inspect":  {missing},
		"quantize": {missing, filepath.Join(t.TempDir(), "q")},
		"run":      {"-m", missing + ".toml", "--ids", "1"},
		"serve":    {missing + ".toml"},
		"synth":    {"--layers", "1", "--vocab", "64", "--out", notFolder},
		"tokenize": {"--tokenizer", missing, "hello"},
	}
	// Commands with no input that can fail (they list what there is), and
	// launch, whose failures are its ranks' (TestE2ELaunchReportsAFailedRank:
	// rank 0's own line, then the launcher's naming the rank).
	cannotFail := []string{"archs", "plugins", "launch"}
	for name := range commands {
		if _, ok := fails[name]; !ok && !slices.Contains(cannotFail, name) {
			t.Errorf("command %s has no failure case here: add one", name)
		}
	}
	for name, args := range fails {
		t.Run(name, func(t *testing.T) {
			variants := [][]string{args}
			if hasFlag(t, name, "-json") {
				variants = append(variants, append([]string{"--json"}, args...))
			}
			for _, a := range variants {
				stdout, stderr, code := execSpecula(t, append([]string{name}, a...)...)
				if code != exitFailure || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "specula "+name+": ") {
					t.Fatalf("%s %v: exit %d, stderr %q; want exit 1 and one line \"specula %s: ...\"", name, a, code, stderr, name)
				}
				if stdout == "" {
					continue
				}
				var out map[string]any
				if !slices.Contains(a, "--json") || json.Unmarshal([]byte(stdout), &out) != nil || out["ok"] != false {
					t.Fatalf("%s %v: stdout %q; want nothing, or with --json one object with \"ok\": false", name, a, stdout)
				}
			}
		})
	}
}

// hasFlag reports whether command name lists flag in its --help.
func hasFlag(t *testing.T, name, flag string) bool {
	t.Helper()
	stdout, _, _ := execSpecula(t, name, "--help")
	return strings.Contains(stdout, "  "+flag+"\n") || strings.Contains(stdout, "  "+flag+" ")
}

// TestE2EInterruptedWritesLeaveNothing: Ctrl-C during synth stops the
// drawing at once (exit 130, "interrupted"); a quantize ended by a second
// Ctrl-C in the middle of its (uninterruptible) write exits 130 at once.
// Neither leaves its output folder or a temporary folder behind.
func TestE2EInterruptedWritesLeaveNothing(t *testing.T) {
	t.Run("synth", func(t *testing.T) {
		parent := t.TempDir()
		// The 4B shapes in float32: minutes of drawing, cut short.
		cmd := exec.Command(specula(t), "synth", "--shape", "4B", "--dtype", "float32", "--vocab", "1024", "--out", filepath.Join(parent, "big"))
		cmd.Env = append(os.Environ(), "SPECULA_LOG=warn")
		s := start(t, cmd)
		for !strings.Contains(s.stderr.String(), "writing a random Qwen3.5") {
			time.Sleep(10 * time.Millisecond)
		}
		if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		_, code := s.wait(t, 5*time.Second)
		if code != 130 || !strings.HasSuffix(s.stderr.String(), "specula synth: interrupted\n") {
			t.Fatalf("exit %d; want 130 and \"interrupted\"\n%s", code, s.stderr)
		}
		nothingLeftIn(t, parent)
	})
	t.Run("quantize", func(t *testing.T) {
		// A source large enough that its write takes a while: 12 layers
		// (about 1 GB) give about a second of writing on the 2-core dev
		// machine; 4 layers gave 0.1 s, which a loaded machine could let
		// pass between seeing the write begin and the interrupt landing.
		src := filepath.Join(t.TempDir(), "src")
		if _, stderr, code := execSpecula(t, "synth", "--layers", "12", "--vocab", "1024", "--dtype", "float32", "--out", src); code != 0 {
			t.Fatalf("synth: exit %d\n%s", code, stderr)
		}
		parent := t.TempDir()
		cmd := exec.Command(specula(t), "quantize", filepath.Join(src, "target"), filepath.Join(parent, "q4"))
		cmd.Env = append(os.Environ(), "SPECULA_LOG=warn")
		s := start(t, cmd)
		// Interrupt once the checkpoint is being written: its partial
		// folder is inside quantize's temporary folder beside q4.
		writing := func() bool {
			work, _ := filepath.Glob(filepath.Join(parent, ".q4.quantize-*", ".q4.partial-*"))
			return len(work) > 0
		}
		deadline := time.Now().Add(60 * time.Second)
		for !writing() {
			if time.Now().After(deadline) {
				t.Fatalf("quantize did not start writing\n%s", s.stderr)
			}
			time.Sleep(2 * time.Millisecond)
		}
		for range 2 {
			if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_, code := s.wait(t, 5*time.Second)
		if code != 130 {
			t.Fatalf("exit %d; want 130\n%s", code, s.stderr)
		}
		nothingLeftIn(t, parent)
	})
}

// nothingLeftIn fails the test if folder dir is not empty.
func nothingLeftIn(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("left behind in %s: %v", dir, names)
	}
}
