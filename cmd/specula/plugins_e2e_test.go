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
	"sync"
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

var pluginE2E struct {
	once sync.Once
	bin  string
	err  error
}

// pluginE2EBinary builds specula once per test run.
func pluginE2EBinary(t *testing.T) string {
	t.Helper()
	pluginE2E.once.Do(func() {
		dir, err := os.MkdirTemp("", "specula-plugins-e2e-")
		if err != nil {
			pluginE2E.err = err
			return
		}
		pluginE2E.bin = filepath.Join(dir, "specula")
		if out, err := exec.Command("go", "build", "-o", pluginE2E.bin, ".").CombinedOutput(); err != nil {
			pluginE2E.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if pluginE2E.err != nil {
		t.Fatal(pluginE2E.err)
	}
	return pluginE2E.bin
}

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
	b, err := os.ReadFile(filepath.Join(fixtures.Dir(t, "qwen35-tiny"), "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		PromptIDs []int32 `json:"prompt_ids"`
		GreedyIDs []int32 `json:"greedy_ids"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return bin, manifest, ref.PromptIDs, ref.GreedyIDs
}

// pluginCommand prepares specula with args, an empty plugin search path
// unless env sets one, and the default log level.
func pluginCommand(t *testing.T, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(pluginE2EBinary(t), args...)
	cmd.Env = append(os.Environ(), "SPECULA_LOG=warn", plugins.EnvPath+"="+t.TempDir())
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// runPluginCommand runs specula and returns stdout, stderr and the exit code.
func runPluginCommand(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := pluginCommand(t, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
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
	ids := joinPluginIDs(prompt)
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
		{syscall.SIGINT, exitFailure}, // run stops at the next round and reports
		{syscall.SIGTERM, 143},
	} {
		t.Run(c.sig.String(), func(t *testing.T) {
			cmd := pluginCommand(t, nil, "run", "-m", manifest, "--plugin-dir", bin.Dir, "--ids", joinPluginIDs(prompt), "--max-tokens", "1000000")
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

func joinPluginIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}
