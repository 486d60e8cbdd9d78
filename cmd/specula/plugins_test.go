package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// writeScriptPlugin installs a shell script that answers `describe` like a
// plugin binary, with its _SHA256SUM (sum overrides the true digest).
func writeScriptPlugin(t *testing.T, dir, name, version, describe, sum string) string {
	t.Helper()
	base := "specula-plugin-" + name + "_v" + version + "_x1.0_" + runtime.GOOS + "_" + runtime.GOARCH
	script := "#!/bin/sh\nif [ \"$1\" = describe ]; then cat <<'JSON'\n" + describe + "\nJSON\nexit 0; fi\necho 'This binary is a plugin' >&2\nexit 1\n"
	p := filepath.Join(dir, base)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := sha256.Sum256([]byte(script))
	if sum == "" {
		sum = hex.EncodeToString(d[:])
	}
	if err := os.WriteFile(p+"_SHA256SUM", []byte(sum+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(d[:])
}

func TestPlugins(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SPECULA_PLUGIN_PATH", filepath.Join(dir, "none"))
	good := writeScriptPlugin(t, dir, "acme", "1.2.0",
		`{"name":"acme","version":"1.2.0","protocol_version":1,"sdk_version":"0.1.0","api":"x1.0","architectures":[{"name":"AcmeDraft","capabilities":["draft","block-draft"],"needs_features":true}]}`, "")
	writeScriptPlugin(t, dir, "liar", "1.0.0", `{"name":"liar","version":"2.0.0","protocol_version":1,"architectures":[]}`, "")
	writeScriptPlugin(t, dir, "tampered", "1.0.0", `{}`, strings.Repeat("0", 64))

	code, out, errOut := run("plugins", "--plugin-dir", dir, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var list []pluginJSON
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	byName := map[string]pluginJSON{}
	for _, p := range list {
		byName[p.Name] = p
	}
	acme := byName["acme"]
	if acme.Status != "ok" || acme.SHA256 != good || acme.Protocol != 1 || len(acme.Architectures) != 1 ||
		acme.Architectures[0].Name != "AcmeDraft" || strings.Join(acme.Architectures[0].Capabilities, ",") != "draft,block-draft" {
		t.Fatalf("acme = %+v", acme)
	}
	if s := byName["liar"].Status; !strings.Contains(s, "describes itself as liar v2.0.0") {
		t.Fatalf("liar status %q", s)
	}
	if s := byName["tampered"].Status; !strings.Contains(s, "tampering") {
		t.Fatalf("tampered status %q", s)
	}

	code, out, _ = run("plugins", "--dir", dir)
	if code != exitOK || !strings.Contains(out, "AcmeDraft [draft, block-draft]") || !strings.Contains(out, "NAME") {
		t.Fatalf("table (exit %d):\n%s", code, out)
	}
	code, out, _ = run("plugins", "--dir", filepath.Join(dir, "missing"))
	if code != exitOK || !strings.Contains(out, "no plugins found") {
		t.Fatalf("empty (exit %d): %s", code, out)
	}
}
