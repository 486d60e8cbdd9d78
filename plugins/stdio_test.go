package plugins_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/registry"
)

// TestSubprocessOutputAfterHandshake: what a plugin writes to os.Stdout or
// os.Stderr while it serves (go-plugin points both at its stdio stream then)
// reaches the host's log instead of vanishing: stdout as a warning that
// names the text and says to log with slog, stderr filed like the plugin's
// other stderr lines.
func TestSubprocessOutputAfterHandshake(t *testing.T) {
	dir, digest := helperInstall(t)
	logs := &logBuffer{}
	h := plugins.NewHost(plugins.Config{
		Dirs:   []string{dir},
		Env:    []string{envHelper + "=1", envMode + "=chatty"},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	t.Cleanup(h.Close)
	reg := registry.New()
	if err := h.LoadPlugin(context.Background(), "helper", digest, reg); err != nil {
		t.Fatal(err)
	}
	target := newTarget()
	d := drafter(t, reg, "ChainSelector", target)
	generate(t, target, d, prompt, 20)
	h.Close()
	// The stdio stream is delivered asynchronously.
	wantOut, wantErr := "chatty: the frobnicator says hello", "chatty: the frobnicator is warm"
	deadline := time.Now().Add(5 * time.Second)
	for !(strings.Contains(logs.String(), wantOut) && strings.Contains(logs.String(), wantErr)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	out := logs.String()
	var stdoutLine string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, wantOut) {
			stdoutLine = l
		}
	}
	if stdoutLine == "" || !strings.Contains(out, wantErr) {
		t.Fatalf("the plugin's stdout and stderr lines are not in the host's log:\n%s", out)
	}
	if !strings.Contains(stdoutLine, "level=WARN") || !strings.Contains(stdoutLine, "slog") || !strings.Contains(stdoutLine, "logger=plugin.helper") {
		t.Fatalf("the stdout line is not a warning naming the plugin and saying to log with slog: %s", stdoutLine)
	}
}
