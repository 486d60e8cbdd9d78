package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specula-dev/specula/internal/fixtures"
)

// A config.json value of the wrong type is reported in the user's words —
// the file, the line, the field and what it should be — not in Go's
// ("cannot unmarshal string into Go struct field rawConfig.hidden_size").
func TestCheckConfigValueOfTheWrongType(t *testing.T) {
	ensureArchs(t)
	manifest := func(target, draft string) string {
		text := "schema = 1\n[target]\npath = \"" + target + "\"\ncapabilities = [\"model\", \"draft-target\"]\ndtype = \"float32\"\n" +
			"[draft]\npath = \"" + draft + "\"\ncapabilities = [\"draft\", \"block-draft\"]\n"
		p := filepath.Join(t.TempDir(), "m.toml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	target, draft := fixtures.Dir(t, "qwen35-tiny"), fixtures.Dir(t, "dflash-tiny")
	for _, c := range []struct {
		fixture, key string
		value        any
		want         string
	}{
		{"qwen35-tiny", "hidden_size", "64", `field "hidden_size" is a string, want an integer`},
		{"dflash-tiny", "dflash_config.block_size", 8.5, `field "dflash_config.block_size" is 8.5, want an integer`},
	} {
		t.Run(c.fixture+" "+c.key, func(t *testing.T) {
			dir := fixtures.WithConfig(t, c.fixture, c.key, c.value)
			m := manifest(dir, draft)
			if c.fixture == "dflash-tiny" {
				m = manifest(target, dir)
			}
			file := filepath.Join(dir, "config.json")
			code, _, stderr := run("check", m)
			if code != exitFailure || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, file+": line ") ||
				!strings.Contains(stderr, c.want) || strings.Contains(stderr, "Go struct") || strings.Contains(stderr, "unmarshal") {
				t.Fatalf("exit %d, stderr %q; want one line naming %s and %s", code, stderr, file, c.want)
			}
		})
	}
}
