package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/specula-dev/specula/plugins/sdk"
)

// EnvPath names the environment variable holding the plugin search path: a
// colon-separated list of folders.
const EnvPath = "SPECULA_PLUGIN_PATH"

// SearchPath returns the folders searched for plugins, in order: dirs (from
// a --plugin-dir flag), then $SPECULA_PLUGIN_PATH's entries if it is set,
// else $XDG_CONFIG_HOME/specula/plugins (~/.config/specula/plugins when
// XDG_CONFIG_HOME is unset). Empty entries and repeats are dropped.
func SearchPath(dirs ...string) []string {
	out := slices.Clone(dirs)
	if env, ok := os.LookupEnv(EnvPath); ok && env != "" {
		out = append(out, filepath.SplitList(env)...)
	} else if cfg := configDir(); cfg != "" {
		out = append(out, filepath.Join(cfg, "specula", "plugins"))
	}
	var uniq []string
	for _, d := range out {
		if d != "" && !slices.Contains(uniq, d) {
			uniq = append(uniq, d)
		}
	}
	return uniq
}

func configDir() string {
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		return x
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".config")
	}
	return ""
}

// Candidate is one plugin binary found on the search path.
type Candidate struct {
	// Path is the binary's path.
	Path string
	// File is its parsed file name.
	File sdk.FileName
	// Digest is the binary's SHA-256 (lowercase hex), or "" when it could
	// not be read.
	Digest string
	// SumFile is the digest its _SHA256SUM file states (lowercase hex), or
	// "" when there is no such file or it states none.
	SumFile string
	// Problem says why the binary cannot be used, or "".
	Problem string
}

// Usable reports whether the candidate can be launched.
func (c *Candidate) Usable() bool { return c.Problem == "" }

// Compatible reports whether the binary is built for this OS, architecture
// and plugin API major version.
func (c *Candidate) Compatible() bool {
	return c.File.OS == runtime.GOOS && c.File.Arch == runtime.GOARCH && c.File.APIMajor == sdk.APIMajor
}

// Discover lists the plugin binaries in dirs (missing folders are skipped),
// checking each one's file name, permissions and _SHA256SUM file and
// computing its digest. Files that do not start with "specula-plugin-", and
// _SHA256SUM files, are not candidates.
func Discover(dirs []string) ([]Candidate, error) {
	var out []Candidate
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("plugin folder %s: %w", dir, err)
		}
		dirProblem := folderProblem(dir)
		for _, e := range entries {
			name := e.Name()
			if !strings.HasPrefix(name, sdk.FilePrefix) || strings.HasSuffix(name, sdk.ChecksumSuffix) {
				continue
			}
			out = append(out, inspect(filepath.Join(dir, name), dirProblem))
		}
	}
	return out, nil
}

// inspect checks one binary.
func inspect(path, dirProblem string) Candidate {
	c := Candidate{Path: path}
	fn, err := sdk.ParseFileName(filepath.Base(path))
	if err != nil {
		c.Problem = err.Error()
		return c
	}
	c.File = fn
	if sum, err := os.ReadFile(path + sdk.ChecksumSuffix); err == nil {
		var problem string
		c.SumFile, problem = parseSumFile(string(sum), filepath.Base(path))
		if problem != "" {
			c.Problem = problem
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		c.Problem = fmt.Sprintf("reading %s: %v", path+sdk.ChecksumSuffix, err)
	}
	if p := fileProblem(path); p != "" {
		c.Problem = p
		return c
	}
	c.Digest, err = digestOf(path)
	switch {
	case c.Problem != "":
		// The _SHA256SUM file is unreadable or malformed.
	case err != nil:
		c.Problem = fmt.Sprintf("reading %s: %v", path, err)
	case dirProblem != "":
		c.Problem = dirProblem
	case c.SumFile != "" && c.SumFile != c.Digest:
		c.Problem = fmt.Sprintf("%s states %s but the binary's SHA-256 is %s (tampering or a broken install: reinstall the plugin)", filepath.Base(path)+sdk.ChecksumSuffix, c.SumFile, c.Digest)
	}
	return c
}

// parseSumFile reads the digest a _SHA256SUM file beside the binary base
// states: the lowercase hex digest alone, as `make plugins` writes it, or a
// line of `sha256sum <binary>` output (the digest, then the file name after
// "  " or " *", folder included); hex digits in either case. It returns the
// digest in lowercase, or a problem naming what is wrong.
func parseSumFile(content, base string) (digest, problem string) {
	file := base + sdk.ChecksumSuffix
	fix := fmt.Sprintf("write it with sha256sum %s | cut -d' ' -f1 > %s", base, file)
	fields := strings.Fields(content)
	if len(fields) == 0 || !validDigest(strings.ToLower(fields[0])) {
		return "", fmt.Sprintf("%s holds no SHA-256 digest (64 hex digits); %s", file, fix)
	}
	digest = strings.ToLower(fields[0])
	switch {
	case len(fields) == 1:
		return digest, ""
	case len(fields) == 2 && filepath.Base(strings.TrimPrefix(fields[1], "*")) == base:
		return digest, ""
	}
	return "", fmt.Sprintf("%s names %q, not %s; %s", file, strings.Join(fields[1:], " "), base, fix)
}

// fileProblem checks that path (after symbolic links) is a regular
// executable file that other users cannot write.
func fileProblem(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	switch m := st.Mode(); {
	case !m.IsRegular():
		return fmt.Sprintf("%s is not a regular file", path)
	case m.Perm()&0o111 == 0:
		return fmt.Sprintf("%s is not executable (chmod +x it)", path)
	case m.Perm()&0o022 != 0:
		return fmt.Sprintf("%s is writable by other users (mode %v); chmod go-w it", path, m.Perm())
	}
	return ""
}

// folderProblem checks that other users cannot write the folder holding a
// plugin (they could swap the binary between the checksum and the exec).
func folderProblem(dir string) string {
	st, err := os.Stat(dir)
	if err != nil {
		return err.Error()
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Sprintf("plugin folder %s is writable by other users (mode %v); chmod go-w it", dir, st.Mode().Perm())
	}
	return ""
}

func digestOf(path string) (string, error) {
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

// validDigest reports whether s is 64 lowercase hex digits.
func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// Find picks the binary of plugin name whose digest is sha256 among the
// candidates for this OS, architecture and API major version in dirs. None
// is an error listing the candidates with their versions and digests; a
// matching binary with a problem (a disagreeing _SHA256SUM, loose
// permissions) is an error naming it.
func Find(dirs []string, name, sha string) (*Candidate, error) {
	if !validDigest(sha) {
		return nil, fmt.Errorf("sha256 %q is not 64 lowercase hex digits (compute it with sha256sum <binary>)", sha)
	}
	all, err := Discover(dirs)
	if err != nil {
		return nil, err
	}
	var seen, near []string
	for i := range all {
		c := &all[i]
		if why := nearMiss(c, name); why != "" {
			near = append(near, why)
		}
		if c.File.Name != name || !c.Compatible() {
			continue
		}
		if c.Digest == sha || (c.SumFile == sha && c.Problem != "") {
			if c.Problem != "" {
				return nil, fmt.Errorf("plugin %s binary %s: %s", name, c.Path, c.Problem)
			}
			return c, nil
		}
		d := c.Digest
		if d == "" {
			d = "unreadable: " + c.Problem
		}
		seen = append(seen, fmt.Sprintf("%s (v%s, sha256 %s)", c.Path, c.File.Version, d))
	}
	want := fmt.Sprintf("%s%s_v<version>_x%d.<minor>_%s_%s", sdk.FilePrefix, name, sdk.APIMajor, runtime.GOOS, runtime.GOARCH)
	unusable := ""
	if len(near) > 0 {
		unusable = ". Unusable: " + strings.Join(near, "; ")
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no binary for plugin %s in %s (want a file named %s); install it there, or pass its folder with --plugin-dir or %s%s", name, strings.Join(dirs, ":"), want, EnvPath, unusable)
	}
	return nil, fmt.Errorf("no binary of plugin %s has the manifest's sha256 %s; candidates: %s. Install the binary the manifest names, or update its sha256 if you trust the new one%s", name, sha, strings.Join(seen, "; "), unusable)
}

// nearMiss says why c, a file that looks like a binary of plugin name, is
// not a candidate: its file name does not parse (a missing v, an uppercase
// letter, no platform suffix), or it is built for another OS, architecture
// or plugin API. It returns "" for a usable candidate and for other
// plugins' files.
func nearMiss(c *Candidate, name string) string {
	base := filepath.Base(c.Path)
	switch {
	case c.File.Name == "":
		rest, ok := strings.CutPrefix(strings.ToLower(base), sdk.FilePrefix+name)
		if ok && (rest == "" || rest[0] == '_') {
			return fmt.Sprintf("%s: %s", c.Path, c.Problem)
		}
	case c.File.Name == name && !c.Compatible():
		return fmt.Sprintf("%s: %s", c.Path, c.incompatibility())
	}
	return ""
}

// incompatibility says how an incompatible binary differs from this host.
func (c *Candidate) incompatibility() string {
	return fmt.Sprintf("built for %s_%s, plugin API x%d; this host is %s, API x%d", c.File.OS, c.File.Arch, c.File.APIMajor, hostOS, sdk.APIMajor)
}
