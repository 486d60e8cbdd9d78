package plugins

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestListStatusIsOneLine: the status of a binary whose `describe` fails is
// one short line — never the binary's usage text — and a `describe` that
// hangs is reported as timed out.
func TestListStatusIsOneLine(t *testing.T) {
	defer func(d time.Duration) { describeTimeout = d }(describeTimeout)
	describeTimeout = 300 * time.Millisecond
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	install(t, dir, fileName("usage", "1.0.0"), "#!/bin/sh\necho 'usage: usage [-v] FILE...' >&2\necho '  -v  verbose' >&2\necho 'also some stdout'\nexit 2\n", 0o755, "")
	install(t, dir, fileName("hang", "1.0.0"), "#!/bin/sh\nsleep 60\n", 0o755, "")
	install(t, dir, fileName("chatty", "1.0.0"), "#!/bin/sh\necho 'Usage: chatty COMMAND'\n", 0o755, "")
	for _, name := range []string{"usage", "hang", "chatty"} {
		p := dir + "/" + fileName(name, "1.0.0")
		sum, err := digestOf(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p+"_SHA256SUM", []byte(sum+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	list, err := List(context.Background(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("listing took %v: the hanging binary held it up", d)
	}
	want := map[string]string{
		"usage":  "`describe` failed (exit status 2); is it a specula plugin?",
		"hang":   "`describe` timed out after 300ms; is it a specula plugin?",
		"chatty": "`describe` printed no JSON description; is it a specula plugin?",
	}
	if len(list) != len(want) {
		t.Fatalf("listed %d binaries: %+v", len(list), list)
	}
	for _, l := range list {
		if l.Status != want[l.File.Name] {
			t.Errorf("%s: status %q; want %q", l.File.Name, l.Status, want[l.File.Name])
		}
		if strings.Contains(strings.ToLower(l.Status), "usage:") || strings.Contains(l.Status, "\n") {
			t.Errorf("%s: status %q holds the binary's output", l.File.Name, l.Status)
		}
	}
}
