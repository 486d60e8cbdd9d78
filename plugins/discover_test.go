package plugins

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/specula-dev/specula/plugins/sdk"
)

func install(t *testing.T, dir, name, content string, mode os.FileMode, sum string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	if sum != "" {
		if err := os.WriteFile(p+sdk.ChecksumSuffix, []byte(sum+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func fileName(name, version string) string {
	return sdk.FileName{Name: name, Version: version, APIMajor: 1, OS: runtime.GOOS, Arch: runtime.GOARCH}.String()
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	p1 := install(t, dir, fileName("acme", "1.0.0"), "one", 0o755, "")
	d1, _ := digestOf(p1)
	p2 := install(t, dir, fileName("acme", "1.1.0"), "two", 0o755, "")
	d2, _ := digestOf(p2)
	if err := os.WriteFile(p2+sdk.ChecksumSuffix, []byte(d2+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	install(t, dir, "specula-plugin-acme_v1.2.0_x2.0_"+runtime.GOOS+"_"+runtime.GOARCH, "future", 0o755, "")
	install(t, dir, "README", "not a plugin", 0o644, "")

	for _, want := range []struct{ path, digest string }{{p1, d1}, {p2, d2}} {
		c, err := Find([]string{dir}, "acme", want.digest)
		if err != nil || c.Path != want.path {
			t.Fatalf("Find(%s) = %v, %v; want %s", want.digest, c, err, want.path)
		}
	}
	_, err := Find([]string{dir}, "acme", strings.Repeat("a", 64))
	if err == nil || !strings.Contains(err.Error(), d1) || !strings.Contains(err.Error(), "v1.1.0") {
		t.Fatalf("unknown digest: err = %v, want the candidates with versions and digests", err)
	}
	if _, err := Find([]string{dir}, "other", d1); err == nil || !strings.Contains(err.Error(), "no binary for plugin other") {
		t.Fatalf("unknown name: err = %v", err)
	}
	if _, err := Find([]string{dir}, "acme", "ABC"); err == nil || !strings.Contains(err.Error(), "64 lowercase hex") {
		t.Fatalf("bad digest: err = %v", err)
	}
}

func TestFindRefusesBrokenInstalls(t *testing.T) {
	dir := t.TempDir()
	p := install(t, dir, fileName("acme", "1.0.0"), "one", 0o755, strings.Repeat("b", 64))
	d, _ := digestOf(p)
	if _, err := Find([]string{dir}, "acme", d); err == nil || !strings.Contains(err.Error(), "tampering") {
		t.Fatalf("disagreeing _SHA256SUM: err = %v", err)
	}
	if _, err := Find([]string{dir}, "acme", strings.Repeat("b", 64)); err == nil || !strings.Contains(err.Error(), "tampering") {
		t.Fatalf("matching _SHA256SUM, different binary: err = %v", err)
	}

	dir2 := t.TempDir()
	p2 := install(t, dir2, fileName("acme", "1.0.0"), "one", 0o777, "")
	d2, _ := digestOf(p2)
	if _, err := Find([]string{dir2}, "acme", d2); err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Fatalf("world-writable binary: err = %v", err)
	}
	if err := os.Chmod(p2, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Find([]string{dir2}, "acme", d2); err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Fatalf("non-executable binary: err = %v", err)
	}
	if err := os.Chmod(p2, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir2, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Find([]string{dir2}, "acme", d2); err == nil || !strings.Contains(err.Error(), "folder") {
		t.Fatalf("world-writable folder: err = %v", err)
	}
}

func TestParseFileName(t *testing.T) {
	f, err := sdk.ParseFileName("specula-plugin-acme-dflash3_v1.2.0_x1.0_linux_amd64")
	if err != nil || f.Name != "acme-dflash3" || f.Version != "1.2.0" || f.APIMajor != 1 || f.OS != "linux" || f.Arch != "amd64" {
		t.Fatalf("ParseFileName = %+v, %v", f, err)
	}
	if f.String() != "specula-plugin-acme-dflash3_v1.2.0_x1.0_linux_amd64" {
		t.Fatalf("String = %s", f)
	}
	for _, bad := range []string{"specula-plugin-acme_1.2.0_x1.0_linux_amd64", "specula-plugin-acme_v1.2_x1.0_linux_amd64", "specula-plugin-Acme_v1.2.0_x1.0_linux_amd64", "specula-plugin-acme_v1.2.0_linux_amd64"} {
		if _, err := sdk.ParseFileName(bad); err == nil {
			t.Errorf("ParseFileName(%s) accepted it", bad)
		}
	}
}

func TestSearchPath(t *testing.T) {
	t.Setenv(EnvPath, "/a:/b::/a")
	if got := strings.Join(SearchPath("/flag"), ","); got != "/flag,/a,/b" {
		t.Fatalf("SearchPath with %s = %s", EnvPath, got)
	}
	t.Setenv(EnvPath, "")
	t.Setenv("XDG_CONFIG_HOME", "/cfg")
	if got := strings.Join(SearchPath(), ","); got != "/cfg/specula/plugins" {
		t.Fatalf("SearchPath with XDG_CONFIG_HOME = %s", got)
	}
}

// A _SHA256SUM file written by `sha256sum <binary> > <binary>_SHA256SUM`
// (the digest, two spaces or " *", then the file name, possibly with its
// folder) or holding the digest in uppercase states the binary's digest; one
// naming another file, or holding no digest, is reported as such rather than
// as a digest that disagrees with itself.
func TestSumFileFormats(t *testing.T) {
	dir := t.TempDir()
	base := fileName("acme", "1.0.0")
	p := install(t, dir, base, "one", 0o755, "")
	d, _ := digestOf(p)
	for _, sum := range []string{
		d + "  " + base,
		d + " *" + base,
		d + "  build/plugins/" + base,
		strings.ToUpper(d),
	} {
		if err := os.WriteFile(p+sdk.ChecksumSuffix, []byte(sum+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if c, err := Find([]string{dir}, "acme", d); err != nil || c.Path != p {
			t.Fatalf("_SHA256SUM %q: Find = %v, %v", sum, c, err)
		}
	}
	for _, c := range []struct{ sum, want string }{
		{d + "  specula-plugin-other_v1.0.0_x1.0_linux_amd64", `names "specula-plugin-other_v1.0.0_x1.0_linux_amd64", not ` + base},
		{"", "holds no SHA-256 digest"},
		{"not-a-digest", "holds no SHA-256 digest"},
	} {
		if err := os.WriteFile(p+sdk.ChecksumSuffix, []byte(c.sum+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Find([]string{dir}, "acme", d)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "tampering") {
			t.Fatalf("_SHA256SUM %q: err = %v, want one saying %q", c.sum, err, c.want)
		}
	}
}

// When no binary of a plugin can be used, Find names the files that look
// like one but are misnamed or built for another platform or API, with what
// is wrong, instead of only the pattern it wanted.
func TestFindNamesNearMisses(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"specula-plugin-acme_1.0.0_x1.0_" + runtime.GOOS + "_" + runtime.GOARCH, "is not a plugin file name"},
		{"specula-plugin-acme", "is not a plugin file name"},
		{"specula-plugin-Acme_v1.0.0_x1.0_" + runtime.GOOS + "_" + runtime.GOARCH, "is not a plugin file name"},
		{"specula-plugin-acme_v1.0_x1.0_" + runtime.GOOS + "_" + runtime.GOARCH, "not a semantic version"},
		{"specula-plugin-acme_v1.0.0_x2.0_" + runtime.GOOS + "_" + runtime.GOARCH, "plugin API x2"},
		{"specula-plugin-acme_v1.0.0_x1.0_plan9_mips", "built for plan9_mips"},
	} {
		dir := t.TempDir()
		p := install(t, dir, c.file, "one", 0o755, "")
		d, _ := digestOf(p)
		_, err := Find([]string{dir}, "acme", d)
		if err == nil || !strings.Contains(err.Error(), c.file) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: err = %v, want it named with %q", c.file, err, c.want)
		}
	}
	// Other plugins' files are not near misses.
	dir := t.TempDir()
	install(t, dir, "specula-plugin-acmex_1.0.0", "one", 0o755, "")
	_, err := Find([]string{dir}, "acme", strings.Repeat("a", 64))
	if err == nil || strings.Contains(err.Error(), "acmex") {
		t.Fatalf("err = %v, want no mention of plugin acmex", err)
	}
}
