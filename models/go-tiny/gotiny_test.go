package gotiny

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// makeFamily writes the files that make dir the family (empty JSON), except
// those named in skip.
func makeFamily(t *testing.T, dir string, skip ...string) string {
	t.Helper()
	for _, f := range required {
		if contains(skip, f) {
			continue
		}
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func writeGoMod(t *testing.T, dir, module string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("// a comment\nmodule "+module+"\n\ngo 1.24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLocateOrder(t *testing.T) {
	tmp := t.TempDir()
	envFam := makeFamily(t, filepath.Join(tmp, "env", "go-tiny"))
	// An installed layout: PREFIX/bin/specula, PREFIX/share/specula/models/go-tiny.
	installedExe := filepath.Join(tmp, "prefix", "bin", "specula")
	installedFam := makeFamily(t, filepath.Join(tmp, "prefix", "share", "specula", "models", "go-tiny"))
	// A checkout: REPO/build/specula, REPO/models/go-tiny, REPO/go.mod.
	repo := filepath.Join(tmp, "repo")
	writeGoMod(t, repo, modulePath)
	repoFam := makeFamily(t, filepath.Join(repo, "models", "go-tiny"))
	buildExe := filepath.Join(repo, "build", "specula")
	deep := filepath.Join(repo, "cmd", "specula")
	nowhere := filepath.Join(tmp, "nowhere")
	broken := makeFamily(t, filepath.Join(tmp, "broken"), filepath.Join(DFlash2Dir, "config.json"))
	otherModule := filepath.Join(tmp, "other")
	writeGoMod(t, otherModule, "example.com/other")
	makeFamily(t, filepath.Join(otherModule, "models", "go-tiny"))

	cases := []struct {
		name, dir, env, exe, cwd string
		want                     string
	}{
		{"the explicit folder", repoFam, envFam, installedExe, deep, repoFam},
		{"the environment before the program's folders", "", envFam, installedExe, deep, envFam},
		{"installed beside the program", "", "", installedExe, nowhere, installedFam},
		{"beside a program built into a checkout", "", "", buildExe, nowhere, repoFam},
		{"the checkout holding the working directory", "", "", filepath.Join(nowhere, "specula"), deep, repoFam},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := locate(c.dir, c.env, c.exe, c.cwd)
			if err != nil || got != c.want {
				t.Fatalf("locate = %q, %v; want %q", got, err, c.want)
			}
		})
	}

	t.Run("an explicit folder is the only place looked at", func(t *testing.T) {
		_, err := locate(broken, envFam, installedExe, deep)
		if err == nil || !strings.Contains(err.Error(), broken+" lacks "+filepath.Join(DFlash2Dir, "config.json")) {
			t.Fatalf("error %v, want it to say %s lacks %s", err, broken, filepath.Join(DFlash2Dir, "config.json"))
		}
	})
	t.Run("a set environment is the only place looked at", func(t *testing.T) {
		_, err := locate("", broken, installedExe, deep)
		if err == nil || !strings.Contains(err.Error(), "($SPECULA_GO_TINY): "+broken+" lacks ") {
			t.Fatalf("error %v, want it to name $SPECULA_GO_TINY and what %s lacks", err, broken)
		}
	})
	t.Run("not found names every place tried", func(t *testing.T) {
		exe := filepath.Join(nowhere, "bin", "specula")
		_, err := locate("", "", exe, filepath.Join(otherModule, "sub"))
		if err == nil {
			t.Fatal("found a family where there is none")
		}
		msg := err.Error()
		for _, want := range []string{
			filepath.Join(nowhere, "bin", "..", "share", "specula", "models", "go-tiny") + " does not exist (installed beside the program)",
			filepath.Join(nowhere, "bin", "..", "models", "go-tiny") + " does not exist (beside the program's folder)",
			"set $SPECULA_GO_TINY",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q\ndoes not say %q", msg, want)
			}
		}
		// example.com/other is not specula's checkout: its models/ is not looked at.
		if strings.Contains(msg, otherModule) {
			t.Errorf("error %q looked inside another module", msg)
		}
	})
}

// In a checkout with the family, Locate finds models/go-tiny from a
// package folder.
func TestLocateInThisCheckout(t *testing.T) {
	t.Setenv(EnvDir, "")
	wd, _ := os.Getwd()
	want, _ := filepath.Abs(filepath.Join(wd, "..", "..", "models", "go-tiny"))
	if check(want) != nil {
		t.Skip("models/go-tiny holds no family yet (train/export.py writes it)")
	}
	got, err := Locate("")
	if err != nil || got != want {
		t.Fatalf("Locate = %q, %v; want %q", got, err, want)
	}
}
