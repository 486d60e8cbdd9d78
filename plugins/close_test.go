package plugins_test

import (
	"io"
	"slices"
	"testing"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/plugins"
)

// The engine reaches the proxy and the drafter through these interfaces
// (it does not import this package).
var (
	_ engine.LoadPreparer = (*plugins.Draft)(nil)
	_ io.Closer           = (*plugins.Drafter)(nil)
)

// TestDrafterClose: Close ends the plugin process and is idempotent;
// requests afterwards decode plainly with reason plugin-closed, quietly (no
// restart, no fault logged).
func TestDrafterClose(t *testing.T) {
	h, reg, err := startHelper(t, "", plugins.Timeouts{})
	if err != nil {
		t.Fatal(err)
	}
	target := newTarget()
	want, _ := generate(t, target, nil, prompt, 24)
	d := drafter(t, reg, "ChainDraft", target)
	pid := d.PID()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got, st := generate(t, target, d, prompt, 24)
	if !slices.Equal(got.Tokens, want.Tokens) {
		t.Fatalf("after Close %v, plain %v", got.Tokens, want.Tokens)
	}
	if st.Fallback[plugins.FaultClosed] == 0 || st.DraftRounds != 0 {
		t.Fatalf("stats %+v; want plain rounds with reason %s", st, plugins.FaultClosed)
	}
	if d.Restarts() != 0 || d.PID() != 0 || len(h.PIDs()) != 0 {
		t.Fatalf("a closed drafter restarted its plugin: %d restarts, pid %d, host pids %v", d.Restarts(), d.PID(), h.PIDs())
	}
}
