// Package gotiny finds go-tiny, the trained demo family that ships with
// specula: a small Qwen3.5 target trained on the Go standard library (with
// its byte-level BPE tokenizer.json) and its DFlash and DFlash2 drafts, in
// one folder:
//
//	go-tiny/            the target: config.json, safetensors, tokenizer.json
//	go-tiny/dflash/     the DFlash draft
//	go-tiny/dflash2/    the DFlash2 draft
//
// The folder's data files are written by train/ (train/export.py); this
// package holds only the code that finds them.
package gotiny

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvDir names the environment variable that points at the family folder.
const EnvDir = "SPECULA_GO_TINY"

// Sub-folders of the family holding the drafts.
const (
	DFlashDir  = "dflash"
	DFlash2Dir = "dflash2"
)

// modulePath is the module whose root holds models/go-tiny in a checkout.
const modulePath = "github.com/specula-dev/specula"

// required lists the files that make a folder the family: the target's
// config and tokenizer, and each draft's config. Weights are checked when
// they load, where a missing shard is named precisely.
var required = []string{
	"config.json",
	"tokenizer.json",
	filepath.Join(DFlashDir, "config.json"),
	filepath.Join(DFlash2Dir, "config.json"),
}

// Locate returns the family folder (absolute). dir, when not empty, is the
// only place looked at; else $SPECULA_GO_TINY, when set, is. Otherwise the
// places are, in order: <exe>/../share/specula/models/go-tiny (an installed specula, exe being the
// running program with links resolved); <exe>/../models/go-tiny (a binary
// built into a checkout's build/); models/go-tiny under the module root at
// or above the working directory. The error names every place tried and
// what it lacked.
func Locate(dir string) (string, error) {
	exe, err := os.Executable()
	if err == nil {
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			exe = resolved
		}
	} else {
		exe = ""
	}
	cwd, _ := os.Getwd()
	return locate(dir, os.Getenv(EnvDir), exe, cwd)
}

// locate is Locate with its inputs given.
func locate(dir, env, exe, cwd string) (string, error) {
	if dir != "" {
		if err := check(dir); err != nil {
			return "", fmt.Errorf("go-tiny family: %w", err)
		}
		return filepath.Abs(dir)
	}
	if env != "" {
		// As explicit as a folder passed in: a wrong setting is an error,
		// not a reason to pick up another copy unnoticed.
		if err := check(env); err != nil {
			return "", fmt.Errorf("go-tiny family ($%s): %w", EnvDir, err)
		}
		return filepath.Abs(env)
	}
	type place struct{ what, path string }
	var places []place
	if exe != "" {
		bin := filepath.Dir(exe)
		places = append(places,
			place{"installed beside the program", filepath.Join(bin, "..", "share", "specula", "models", "go-tiny")},
			place{"beside the program's folder", filepath.Join(bin, "..", "models", "go-tiny")})
	}
	if root := moduleRoot(cwd); root != "" {
		places = append(places, place{"in the checkout", filepath.Join(root, "models", "go-tiny")})
	}
	var tried []string
	seen := map[string]bool{}
	for _, p := range places {
		if seen[filepath.Clean(p.path)] {
			continue // a binary in the checkout's build/ names the checkout's folder twice
		}
		seen[filepath.Clean(p.path)] = true
		err := check(p.path)
		if err == nil {
			return filepath.Abs(p.path)
		}
		tried = append(tried, fmt.Sprintf("%s (%s)", err, p.what))
	}
	if len(tried) == 0 {
		tried = append(tried, "no place: the program's path is unknown and "+cwd+" is not inside specula's checkout")
	}
	return "", fmt.Errorf("go-tiny family not found; tried %s; set $%s or pass its folder (the one holding config.json, tokenizer.json, %s/ and %s/)",
		strings.Join(tried, "; "), EnvDir, DFlashDir, DFlash2Dir)
}

// check says what dir lacks to be the family, or nil.
func check(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s does not exist", dir)
		}
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	var missing []string
	for _, f := range required {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks %s", dir, strings.Join(missing, ", "))
	}
	return nil
}

// moduleRoot is the nearest folder at or above dir whose go.mod declares
// specula's module, or "".
func moduleRoot(dir string) string {
	if dir == "" {
		return ""
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			found := false
			for sc.Scan() {
				if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "module ") {
					found = strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "module ")), `"`) == modulePath
					break
				}
			}
			f.Close()
			if found {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
