// Package plugintest builds plugin binaries for tests and installs them the
// way a user would: under the file name the host looks for, beside their
// _SHA256SUM file. With it a plugin author (and specula's own tests) can run
// a plugin through the real host path — discovery, checksum, go-plugin
// handshake, Describe, Load — from `go test`, without `make`:
//
//	func TestThroughTheHost(t *testing.T) {
//		bin := plugintest.Build(t, ".") // the plugin's main package
//		host := plugins.NewHost(plugins.Config{Dirs: []string{bin.Dir}})
//		defer host.Close()
//		// ... a manifest with plugin = bin.Name and sha256 = bin.SHA256
//	}
//
// It also checks that plugin processes are gone (Alive, WaitGone), so tests
// can assert that no plugin outlives its host.
package plugintest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/plugins/sdk"
)

// Binary is a plugin binary installed in a plugin folder.
type Binary struct {
	// Dir is the folder holding it (pass it as a plugin search folder).
	Dir string
	// Path is the binary's path, named as the host expects.
	Path string
	// Name and Version are what the plugin's describe command reports.
	Name, Version string
	// SHA256 is the binary's digest (lowercase hex), as its _SHA256SUM file
	// and a manifest's sha256 hold it.
	SHA256 string
}

// Build compiles the plugin main package pkg (a package path or a folder
// relative to the test's working folder: "." in the plugin's own package)
// with `go build`, asks the binary `describe` for its name and version, and
// installs it in a fresh folder under t.TempDir() as
// specula-plugin-<name>_v<version>_x<api>_<os>_<arch> (mode 0755, folder not
// writable by others) with its _SHA256SUM file. It fails the test on any
// error, with go build's output.
func Build(t testing.TB, pkg string) *Binary {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "plugin")
	touchSources(pkg)
	gobin, err := goTool()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, "build", "-o", tmp, pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("plugintest: go build %s: %v\n%s", pkg, err, out)
	}
	var stdout, stderr bytes.Buffer
	desc := exec.Command(tmp, "describe")
	desc.Env = withoutCookie(os.Environ())
	desc.Stdout, desc.Stderr = &stdout, &stderr
	if err := desc.Run(); err != nil {
		t.Fatalf("plugintest: %s describe: %v\n%s", pkg, err, stderr.String())
	}
	var d sdk.Description
	if err := json.Unmarshal(stdout.Bytes(), &d); err != nil {
		t.Fatalf("plugintest: %s describe printed %q: %v", pkg, stdout.String(), err)
	}
	b := &Binary{Dir: dir, Name: d.Name, Version: d.Version}
	b.Path = filepath.Join(dir, sdk.FileName{Name: d.Name, Version: d.Version, APIMajor: sdk.APIMajor, APIMinor: sdk.APIMinor,
		OS: runtime.GOOS, Arch: runtime.GOARCH}.String())
	if err := os.Rename(tmp, b.Path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(b.Path, 0o755); err != nil {
		t.Fatal(err)
	}
	if b.SHA256, err = digest(b.Path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Path+sdk.ChecksumSuffix, []byte(b.SHA256+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// touchSources reads the Go files of pkg when it is a folder, so that go
// test's result cache (which records the files a test opens, not those its
// child processes read) is invalidated when the plugin's own source changes.
func touchSources(pkg string) {
	files, _ := filepath.Glob(filepath.Join(pkg, "*.go"))
	for _, f := range files {
		_, _ = os.ReadFile(f)
	}
}

// goTool finds the go command of the toolchain running the test.
func goTool() (string, error) {
	name := "go"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	if root := runtime.GOROOT(); root != "" {
		if p := filepath.Join(root, "bin", name); fileExists(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("plugintest: no go command to build the plugin with: %w", err)
	}
	return p, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// withoutCookie drops the handshake cookie, so the binary describes itself
// instead of serving.
func withoutCookie(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, sdk.MagicCookieKey+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func digest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Alive reports whether process pid exists (a zombie counts as alive until
// its parent reaps it).
func Alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// WaitGone waits up to 10 s for every process in pids to end and fails the
// test naming those still running.
func WaitGone(t testing.TB, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		for _, pid := range pids {
			if Alive(pid) {
				left = append(left, strconv.Itoa(pid))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin processes still running: %s", strings.Join(left, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Running returns the ids of the running processes whose executable is path
// (by their command line, through ps), for tests that start a program which
// starts plugins and must check none outlives it.
func Running(t testing.TB, path string) []int {
	t.Helper()
	out, err := exec.Command("ps", "-A", "-o", "pid=", "-o", "args=").Output()
	if err != nil {
		t.Fatalf("plugintest: ps: %v", err)
	}
	var pids []int
	for _, line := range strings.Split(string(out), "\n") {
		pidText, args, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if exe, _, _ := strings.Cut(strings.TrimSpace(args), " "); exe == path {
			if pid, err := strconv.Atoi(pidText); err == nil && Alive(pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
