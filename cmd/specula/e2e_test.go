package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
)

// End-to-end tests of the built binary: every user-facing subcommand on the
// fixtures, checking outputs and exit codes as a user (or a script) sees them.

// specula builds the binary once per test run.
func specula(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "specula-e2e-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "specula")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// execSpecula runs the binary and returns stdout, stderr and the exit code.
func execSpecula(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(specula(t), args...)
	cmd.Env = append(os.Environ(), "SPECULA_LOG=warn")
	return runCommand(t, cmd)
}

// execSpeculaJSON runs specula with args that print one JSON document
// (--json), fails the test unless it exits 0 with a document that decodes
// into out, and returns what it printed for further checks.
func execSpeculaJSON(t *testing.T, out any, args ...string) (stdout, stderr string) {
	t.Helper()
	stdout, stderr, code := execSpecula(t, args...)
	if code != 0 {
		t.Fatalf("specula %v: exit %d\n%s", args, code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		t.Fatalf("specula %v printed %q: %v", args, stdout, err)
	}
	return stdout, stderr
}

// runCommand runs cmd and returns stdout, stderr and the exit code.
func runCommand(t *testing.T, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
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

// fixtureManifest writes a manifest over the fixture pair with absolute
// paths (the shipped examples use paths relative to the repository).
func fixtureManifest(t *testing.T, draft string) string {
	t.Helper()
	caps := `["draft", "block-draft"]`
	if draft == "dflash2-tiny" {
		caps = `["draft", "block-draft", "selector"]`
	}
	text := fmt.Sprintf(`schema = 1
name = "e2e"
[target]
path = %q
capabilities = ["model", "draft-target"]
dtype = "float32"
[draft]
path = %q
capabilities = %s
[sampling]
temperature = 0.0
max_tokens = 32
`, fixtures.Dir(t, "qwen35-tiny"), fixtures.Dir(t, draft), caps)
	path := filepath.Join(t.TempDir(), draft+".toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func fixturePrompt(t *testing.T) (prompt, greedy []int32) {
	t.Helper()
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
	return ref.PromptIDs, ref.GreedyIDs
}

func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

// specula run with and without the draft prints identical ids, equal to the
// target's greedy continuation from the reference implementation.
func TestE2ERunWithAndWithoutDraft(t *testing.T) {
	prompt, greedy := fixturePrompt(t)
	for _, draft := range []string{"dflash-tiny", "dflash2-tiny"} {
		t.Run(draft, func(t *testing.T) {
			m := fixtureManifest(t, draft)
			var results [2]struct {
				IDs        []int32 `json:"ids"`
				DoneReason string  `json:"done_reason"`
				Stats      struct {
					Rounds               int                `json:"rounds"`
					Drafted              int                `json:"drafted"`
					Accepted             int                `json:"accepted"`
					MeanAcceptanceLength float64            `json:"mean_acceptance_length"`
					AcceptanceByPosition []float64          `json:"acceptance_by_position"`
					Fallbacks            map[string]float64 `json:"fallbacks"`
				} `json:"stats"`
			}
			for i, extra := range [][]string{nil, {"--no-draft"}} {
				args := append([]string{"run", "-m", m, "--ids", joinIDs(prompt), "--json"}, extra...)
				execSpeculaJSON(t, &results[i], args...)
			}
			spec, plain := results[0], results[1]
			if !slices.Equal(spec.IDs, plain.IDs) || !slices.Equal(plain.IDs, greedy) {
				t.Fatalf("with draft %v\nwithout %v\nreference %v", spec.IDs, plain.IDs, greedy)
			}
			if spec.DoneReason != "length" || spec.Stats.Drafted == 0 || plain.Stats.Drafted != 0 {
				t.Fatalf("done %q, drafted %d with the draft and %d without", spec.DoneReason, spec.Stats.Drafted, plain.Stats.Drafted)
			}
			if plain.Stats.Fallbacks["no-draft"] == 0 {
				t.Fatalf("--no-draft run does not name its fallback: %+v", plain.Stats)
			}
		})
	}
}

// Streaming mode prints ids as they come and a stats line on stderr.
func TestE2ERunStreams(t *testing.T) {
	prompt, greedy := fixturePrompt(t)
	stdout, stderr, code := execSpecula(t, "run", "-m", fixtureManifest(t, "dflash-tiny"), "--ids", joinIDs(prompt), "--max-tokens", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(greedy[:8])), " "), "[]")
	if strings.TrimSpace(stdout) != want {
		t.Fatalf("stdout %q, want %q", stdout, want)
	}
	if !strings.Contains(stderr, "tok/s") || !strings.Contains(stderr, "8 tokens") {
		t.Fatalf("stderr lacks the stats line: %q", stderr)
	}
}

func TestE2ERunErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no manifest", []string{"run", "--ids", "1,2"}, 2, "-m MANIFEST is required"},
		{"missing manifest file", []string{"run", "-m", "/nonexistent/m.toml", "--ids", "1"}, 1, "/nonexistent/m.toml"},
		{"bad ids", []string{"run", "-m", "x.toml", "--ids", "1,-2"}, 2, "not a token id"},
		{"unknown flag", []string{"run", "--bogus"}, 2, "bogus"},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
		// Help on a command that does not exist is that same mistake, not
		// the program's usage with exit 0.
		{"help on an unknown command", []string{"help", "frobnicate"}, 2, "specula: unknown command \"frobnicate\"\nsee 'specula --help'\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := execSpecula(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

func TestE2EDemo(t *testing.T) {
	stdout, stderr, code := execSpecula(t, "demo", "--random", "--json", "--dir", filepath.Join(t.TempDir(), "demo"), "--max-tokens", "24")
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s", code, stderr)
	}
	var out struct {
		RandomWeights bool `json:"random_weights"`
		Identical     bool `json:"identical"`
		Plain         struct {
			IDs []int32 `json:"ids"`
		} `json:"plain"`
		Speculative struct {
			IDs   []int32 `json:"ids"`
			Stats struct {
				Drafted     int    `json:"drafted"`
				DepthPolicy string `json:"depth_policy"`
			} `json:"stats"`
		} `json:"speculative"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("demo --json printed %q: %v", stdout, err)
	}
	if !out.RandomWeights || !out.Identical || len(out.Plain.IDs) != 24 || !slices.Equal(out.Plain.IDs, out.Speculative.IDs) {
		t.Fatalf("demo result %+v", out)
	}
	if out.Speculative.Stats.Drafted == 0 || out.Speculative.Stats.DepthPolicy != "fixed 7" {
		t.Fatalf("the demo's speculative run did not draft with the selector at depth 7: %+v", out.Speculative.Stats)
	}
}

func TestE2EInspectArchsCheck(t *testing.T) {
	file := filepath.Join(fixtures.Dir(t, "qwen35-tiny"), "model.safetensors")
	stdout, stderr, code := execSpecula(t, "inspect", file)
	if code != 0 || !strings.Contains(stdout, "model.embed_tokens.weight") {
		t.Fatalf("inspect: exit %d\n%s\n%s", code, stdout, stderr)
	}
	bad := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := os.WriteFile(bad, []byte("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := execSpecula(t, "inspect", bad); code != 1 || !strings.Contains(stderr, "LFS") {
		t.Fatalf("inspect of an LFS pointer: exit %d, %q", code, stderr)
	}

	stdout, _, code = execSpecula(t, "archs", "--json")
	if code != 0 {
		t.Fatalf("archs: exit %d", code)
	}
	for _, name := range []string{"Qwen3_5ForCausalLM", "DFlashDraftModel", "DFlash2DraftModel"} {
		if !strings.Contains(stdout, name) {
			t.Fatalf("archs --json lacks %s:\n%s", name, stdout)
		}
	}

	for _, draft := range []string{"dflash-tiny", "dflash2-tiny"} {
		if stdout, stderr, code := execSpecula(t, "check", fixtureManifest(t, draft)); code != 0 {
			t.Fatalf("check %s: exit %d\n%s\n%s", draft, code, stdout, stderr)
		}
	}
	// The shipped example manifests name the fixtures in testdata/fixtures
	// relative to their own folder, so they check out in any clone.
	for _, m := range []string{"fixture-dflash.toml", "fixture-dflash2.toml"} {
		if stdout, stderr, code := execSpecula(t, "check", filepath.Join("../../manifests", m)); code != 0 {
			t.Fatalf("check %s: exit %d\n%s\n%s", m, code, stdout, stderr)
		}
	}
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func TestE2EPluginsListing(t *testing.T) {
	stdout, stderr, code := execSpecula(t, "plugins", "--json", "--dir", t.TempDir())
	if code != 0 {
		t.Fatalf("plugins: exit %d\n%s", code, stderr)
	}
	var v any
	if err := json.Unmarshal([]byte(stdout), &v); err != nil {
		t.Fatalf("plugins --json printed %q: %v", stdout, err)
	}
	if _, stderr, code := execSpecula(t, "plugins", "--bogus"); code != 2 || !strings.Contains(stderr, "bogus") {
		t.Fatalf("plugins --bogus: exit %d, %q", code, stderr)
	}
}

// run --json always has the "text" the docs list, also when the generated
// text is empty: here a stop string that is the first token's own text
// (encoding/json's omitempty had dropped the field, so a script reading
// .text found nothing).
func TestE2ERunJSONAlwaysHasText(t *testing.T) {
	m, err := filepath.Abs(filepath.Join("..", "..", "manifests", "go-tiny.toml"))
	if err != nil {
		t.Fatal(err)
	}
	runText := func(args ...string) map[string]any {
		t.Helper()
		stdout, stderr, code := execSpecula(t, append([]string{"run", "-m", m, "func main() {", "--json", "--quiet"}, args...)...)
		var out map[string]any
		if code != 0 || json.Unmarshal([]byte(stdout), &out) != nil {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
		return out
	}
	first, _ := runText("--max-tokens", "1")["text"].(string)
	if strings.TrimSpace(first) == "" {
		t.Fatalf("the first token's text is %q; this test needs a visible one", first)
	}
	out := runText("--max-tokens", "8", "--stop", first)
	if text, ok := out["text"]; !ok || text != "" || out["done_reason"] != "stop" {
		t.Fatalf("--stop %q: text %v (present %v), done_reason %v; want \"text\": \"\" and stop", first, text, ok, out["done_reason"])
	}
}
