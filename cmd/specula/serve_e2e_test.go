package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/internal/fixtures"
	gotiny "github.com/specula-dev/specula/models/go-tiny"
)

// runJSONText runs `specula run --json` and returns its text and token count.
func runJSONText(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out runOutput
	execSpeculaJSON(t, &out, append([]string{"run", "--json", "--quiet"}, args...)...)
	return out.Text, len(out.IDs)
}

// startServe starts `specula serve` on a free port and returns the process
// and its URL; the server's log goes to the test log.
func startServe(t *testing.T, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(specula(t), append([]string{"serve", "--port", "0"}, args...)...)
	cmd.Env = append(os.Environ(), "SPECULA_LOG=warn")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`listening on (http://\S+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
			t.Log("serve: " + sc.Text())
		}
	}()
	select {
	case url := <-urls:
		return cmd, url
	case <-time.After(60 * time.Second):
		t.Fatal("specula serve did not say where it listens")
	}
	return nil, ""
}

// waitExit waits for the process and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("specula serve did not exit within %v", within)
	}
	return -1
}

// The real `openai` and `ollama` Python clients, from PyPI, against the
// built `specula serve` on the fixture pair: every API and mode gives what
// `specula run` gives for the same request, and errors, the queue,
// disconnects, keep_alive, the prompt cache and 64 concurrent clients
// behave (scripts/serve_clients.py). Then shutdown: SIGTERM lets a running
// stream finish and exits 0; Ctrl-C exits 130.
func TestServeRealClients(t *testing.T) {
	out, err := exec.Command("../../scripts/pyclients.sh").Output()
	if err != nil {
		t.Fatalf("setting up the Python clients (scripts/pyclients.sh): %v", err)
	}
	python := strings.TrimSpace(string(out))
	manifest := fixtures.ChatManifest(t, "fixture-chat", "[speculation]\nmax_depth = 7\n")
	const maxTokens, maxQueue = 16, 64
	rawPrompt, system, user := "The quick brown fox", "You are a terse assistant.", "Why is the sky blue?"
	rawText, rawTokens := runJSONText(t, "-m", manifest, "--temperature", "0", "--max-tokens", fmt.Sprint(maxTokens), rawPrompt)
	chatText, chatTokens := runJSONText(t, "-m", manifest, "--temperature", "0", "--max-tokens", fmt.Sprint(maxTokens), "--chat", "--system", system, user)
	if len([]rune(chatText)) < 4 {
		t.Fatalf("the reference chat answer %q is too short to pick a stop string from", chatText)
	}
	// A stop string from the middle of the answer: the served text must end
	// right before its first occurrence.
	runes := []rune(chatText)
	stop := string(runes[len(runes)/2 : len(runes)/2+2])
	// The test tokenizer has no EOS token, so a generation runs to its
	// budget: the disconnect and shutdown checks rely on it.
	long := "Once upon a time"
	var prompts []string
	for i := range 8 {
		prompts = append(prompts, fmt.Sprintf("Request %d: a short story about the number %d.", i, i*7))
	}
	refs := map[string]any{"raw_prompt": rawPrompt, "raw_text": rawText, "raw_tokens": rawTokens,
		"system": system, "user": user, "chat_text": chatText, "chat_tokens": chatTokens, "stop": stop,
		"max_tokens": maxTokens, "load_prompts": prompts, "max_queue": maxQueue, "long_prompt": long}
	refsPath := filepath.Join(t.TempDir(), "refs.json")
	data, _ := json.Marshal(refs)
	if err := os.WriteFile(refsPath, data, 0o644); err != nil {
		t.Fatal(err)
	}

	cmd, url := startServe(t, "--max-queue", fmt.Sprint(maxQueue), manifest)
	py := exec.Command(python, "../../scripts/serve_clients.py", "--url", url, "--model", "fixture-chat", "--refs", refsPath)
	pyOut, err := py.CombinedOutput()
	t.Logf("serve_clients.py:\n%s", pyOut)
	if err != nil {
		t.Fatalf("the Python clients' checks failed: %v", err)
	}

	// SIGTERM while a stream runs: the stream finishes, the server exits 0.
	resp, err := http.Post(url+"/api/generate", "application/json", strings.NewReader(
		fmt.Sprintf(`{"model":"fixture-chat","prompt":%q,"raw":true,"options":{"num_predict":300,"temperature":0}}`, long)))
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("the stream broke at SIGTERM: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(rest)), "\n")
	var final struct {
		Done       bool   `json:"done"`
		DoneReason string `json:"done_reason"`
		EvalCount  int    `json:"eval_count"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &final); err != nil || !final.Done || final.EvalCount != 300 {
		t.Fatalf("after SIGTERM the stream ended with %q (%v)", lines[len(lines)-1], err)
	}
	if code := waitExit(t, cmd, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}

	// Ctrl-C: exit 130.
	cmd, _ = startServe(t, manifest)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, 30*time.Second); code != exitInterrupted {
		t.Fatalf("exit %d after Ctrl-C, want %d", code, exitInterrupted)
	}
}

// The real clients against the trained go-tiny family with its DFlash2 draft:
// a base model of Go code, so raw generation and completions (the chat
// checks need a template it does not have). The served text equals `specula
// run`'s, and the server reports drafted and accepted tokens — a trained
// draft accepted through the APIs users call.
func TestServeRealClientsGoTiny(t *testing.T) {
	dir, err := gotiny.Locate("")
	if err != nil {
		t.Skipf("the go-tiny family is not in this checkout: %v", err)
	}
	out, err := exec.Command("../../scripts/pyclients.sh").Output()
	if err != nil {
		t.Fatalf("setting up the Python clients (scripts/pyclients.sh): %v", err)
	}
	python := strings.TrimSpace(string(out))
	manifest := filepath.Join(filepath.Dir(filepath.Dir(dir)), "manifests", "go-tiny-dflash2.toml")
	const maxTokens = 48
	prompt := "// Reverse returns s with its runes in reverse order.\nfunc Reverse(s string) string {\n"
	text, tokens := runJSONText(t, "-m", manifest, "--temperature", "0", "--max-tokens", fmt.Sprint(maxTokens), prompt)
	refs := map[string]any{"raw_prompt": prompt, "raw_text": text, "raw_tokens": tokens, "max_tokens": maxTokens}
	refsPath := filepath.Join(t.TempDir(), "refs.json")
	data, _ := json.Marshal(refs)
	if err := os.WriteFile(refsPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, url := startServe(t, manifest)
	py := exec.Command(python, "../../scripts/serve_clients.py", "--url", url, "--model", "go-tiny-dflash2", "--refs", refsPath, "--completion-only")
	pyOut, err := py.CombinedOutput()
	t.Logf("serve_clients.py --completion-only:\n%s", pyOut)
	if err != nil {
		t.Fatalf("the Python clients' checks failed: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, 30*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
}
