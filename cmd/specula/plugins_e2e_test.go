package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/plugins/sdk/plugintest"
)

// End-to-end tests of the plugin wiring of the built binary: run, bench and
// check launch the plugin a manifest names (from --plugin-dir or
// $SPECULA_PLUGIN_PATH), and no plugin process outlives specula, whether
// it exits normally, on Ctrl-C or on SIGTERM.

// pluginSetup builds the dflash example plugin into a plugin folder and
// writes a greedy manifest over the fixture pair that names it.
func pluginSetup(t *testing.T) (bin *plugintest.Binary, manifest string, prompt, greedy []int32) {
	t.Helper()
	bin = plugintest.Build(t, "../../plugins/examples/dflash")
	text := fmt.Sprintf(`schema = 1
name = "plugin-e2e"
[target]
path = %q
capabilities = ["model", "draft-target"]
dtype = "float32"
[draft]
path = %q
capabilities = ["draft", "block-draft"]
plugin = %q
sha256 = %q
[sampling]
temperature = 0.0
max_tokens = 32
`, fixtures.Dir(t, "qwen35-tiny"), fixtures.Dir(t, "dflash-tiny"), bin.Name, bin.SHA256)
	manifest = filepath.Join(t.TempDir(), "plugin.toml")
	if err := os.WriteFile(manifest, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	prompt, greedy = fixturePrompt(t)
	return bin, manifest, prompt, greedy
}

// pluginCommand prepares specula with args, an empty plugin search path
// unless env sets one, and the default log level.
func pluginCommand(t *testing.T, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(specula(t), args...)
	cmd.Env = append(os.Environ(), "SPECULA_LOG=warn", plugins.EnvPath+"="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// runPluginCommand runs specula and returns stdout, stderr and the exit code.
func runPluginCommand(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return runCommand(t, pluginCommand(t, env, args...))
}

// noPluginLeft fails the test if a process of the plugin binary runs.
func noPluginLeft(t *testing.T, bin *plugintest.Binary) {
	t.Helper()
	if pids := plugintest.Running(t, bin.Path); len(pids) > 0 {
		t.Fatalf("plugin processes %v outlived specula", pids)
	}
}

func TestE2EPluginCommands(t *testing.T) {
	bin, manifest, prompt, greedy := pluginSetup(t)
	ids := joinIDs(prompt)
	t.Run("run", func(t *testing.T) {
		stdout, stderr, code := runPluginCommand(t, nil, "run", "-m", manifest, "--plugin-dir", bin.Dir, "--ids", ids, "--json", "--quiet")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var out struct {
			IDs   []int32 `json:"ids"`
			Stats struct {
				DraftRounds int            `json:"draft_rounds"`
				Fallbacks   map[string]int `json:"fallbacks"`
			} `json:"stats"`
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
		if !slices.Equal(out.IDs, greedy[:32]) {
			t.Fatalf("ids %v; want the reference greedy %v", out.IDs, greedy[:32])
		}
		for reason := range out.Stats.Fallbacks {
			if strings.HasPrefix(reason, "plugin-") {
				t.Fatalf("plugin fallback: %v", out.Stats.Fallbacks)
			}
		}
		noPluginLeft(t, bin)
	})
	t.Run("bench, plugin folder from the environment", func(t *testing.T) {
		stdout, stderr, code := runPluginCommand(t, []string{plugins.EnvPath + "=" + bin.Dir},
			"bench", "-m", manifest, "--repeats", "1", "--warmup", "0", "--max-tokens", "8", "--json", "--quiet")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var out struct {
			Speculative *struct{} `json:"speculative"`
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Speculative == nil {
			t.Fatalf("no speculative results (%v): %s", err, stdout)
		}
		noPluginLeft(t, bin)
	})
	t.Run("check", func(t *testing.T) {
		stdout, stderr, code := runPluginCommand(t, nil, "check", "--plugin-dir", bin.Dir, manifest)
		if code != 0 || !strings.Contains(stdout, "DFlashDraftModel (from config.json, plugin dflash)") {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		noPluginLeft(t, bin)
	})
	t.Run("plugin not found", func(t *testing.T) {
		_, stderr, code := runPluginCommand(t, nil, "run", "-m", manifest, "--ids", ids)
		if code != exitFailure || !strings.Contains(stderr, `plugin "dflash": no binary for plugin dflash`) || !strings.Contains(stderr, "--plugin-dir") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
	})
}

// TestE2EPluginInterrupted: specula interrupted mid-generation (Ctrl-C, or
// SIGTERM, sent to specula alone) ends its plugin before it exits.
func TestE2EPluginInterrupted(t *testing.T) {
	bin, manifest, prompt, _ := pluginSetup(t)
	for _, c := range []struct {
		sig  syscall.Signal
		code int
	}{
		{syscall.SIGINT, 130}, // run stops at the next round, reports, and exits 128+2
		{syscall.SIGTERM, 143},
	} {
		t.Run(c.sig.String(), func(t *testing.T) {
			cmd := pluginCommand(t, nil, "run", "-m", manifest, "--plugin-dir", bin.Dir, "--ids", joinIDs(prompt), "--max-tokens", "1000000")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Wait until tokens stream: the plugin is loaded and drafting.
			r := bufio.NewReader(stdout)
			if _, err := r.ReadString(' '); err != nil {
				t.Fatalf("no output: %v (%s)", err, stderr.String())
			}
			pids := plugintest.Running(t, bin.Path)
			if len(pids) != 1 {
				t.Fatalf("plugin processes %v while generating; want one", pids)
			}
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, _ = r.WriteTo(new(bytes.Buffer))
				done <- cmd.Wait()
			}()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("specula did not exit after %v", c.sig)
			}
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != c.code {
				t.Fatalf("exit %d (%v); want %d\n%s", code, err, c.code, stderr.String())
			}
			// specula waited for its plugin: it is gone already.
			for _, pid := range pids {
				if plugintest.Alive(pid) {
					t.Fatalf("plugin %d outlived specula", pid)
				}
			}
			if strings.Contains(stderr.String(), "plugin draft fault") {
				t.Fatalf("the interrupt looked like a plugin fault:\n%s", stderr.String())
			}
		})
	}
}

// A plugin draft borrows a quantized (MLX-format) target's embedding and
// head (the host sends their scales and biases too), and greedy output
// with it equals plain greedy output on that target.
func TestE2EPluginOnQuantizedTarget(t *testing.T) {
	bin := plugintest.Build(t, "../../plugins/examples/dflash")
	prompt, _ := fixturePrompt(t)
	text := fmt.Sprintf(`schema = 1
name = "plugin-quantized"
[target]
path = %q
capabilities = ["model", "draft-target"]
dtype = "float32"
[draft]
path = %q
capabilities = ["draft", "block-draft"]
plugin = %q
sha256 = %q
[sampling]
temperature = 0.0
max_tokens = 32
`, fixtures.Dir(t, "qwen35-tiny-mlx-q4"), fixtures.Dir(t, "dflash-tiny"), bin.Name, bin.SHA256)
	manifest := filepath.Join(t.TempDir(), "plugin.toml")
	if err := os.WriteFile(manifest, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var runs [2]struct {
		IDs   []int32 `json:"ids"`
		Stats struct {
			Drafted   int            `json:"drafted"`
			Fallbacks map[string]int `json:"fallbacks"`
		} `json:"stats"`
	}
	for i, extra := range [][]string{nil, {"--no-draft"}} {
		args := append([]string{"run", "-m", manifest, "--plugin-dir", bin.Dir, "--ids", joinIDs(prompt), "--json", "--quiet"}, extra...)
		stdout, stderr, code := runPluginCommand(t, nil, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &runs[i]); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
	}
	for reason := range runs[0].Stats.Fallbacks {
		if strings.HasPrefix(reason, "plugin-") {
			t.Fatalf("plugin fallback: %v", runs[0].Stats.Fallbacks)
		}
	}
	if !slices.Equal(runs[0].IDs, runs[1].IDs) || len(runs[0].IDs) != 32 || runs[0].Stats.Drafted == 0 {
		t.Fatalf("with the plugin draft %v (drafted %d)\nplain %v", runs[0].IDs, runs[0].Stats.Drafted, runs[1].IDs)
	}
	noPluginLeft(t, bin)
}
