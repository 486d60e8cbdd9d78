package manifests

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/specula-dev/specula/loader"
)

// inspectWeights opens the checkpoint's weight files through the loader,
// which reads and validates their headers only (never tensor data), keeps
// shard paths inside the checkpoint folder, and recognises Git LFS pointers.
func inspectWeights(ck *Checkpoint) Weights {
	c, err := loader.OpenCheckpoint(ck.Dir)
	if err != nil {
		return weightsProblem(ck, err)
	}
	defer c.Close()
	w := Weights{Status: WeightsPresent, Tensors: len(c.Tensors())}
	for _, f := range c.Shards() {
		rel, err := filepath.Rel(ck.Dir, f.Path())
		if err != nil {
			rel = f.Path()
		}
		w.Files = append(w.Files, rel)
		w.Bytes += f.Size()
	}
	return w
}

// hasWeightFiles reports whether dir holds a *.safetensors file or a
// safetensors index.
func hasWeightFiles(dir string) bool {
	matches, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(matches) > 0 {
		return true
	}
	_, err := os.Stat(filepath.Join(dir, loader.IndexName))
	return err == nil
}

// weightsProblem classifies a loader error: not downloaded (missing files,
// missing shards, Git LFS pointers) or broken.
func weightsProblem(ck *Checkpoint, err error) Weights {
	w := Weights{Status: WeightsInvalid, Err: err}
	var le *loader.Error
	detail := err.Error()
	if errors.As(err, &le) {
		detail = le.Detail
		if rel, rerr := filepath.Rel(ck.Dir, le.File); rerr == nil && filepath.IsLocal(rel) {
			detail = filepath.Join(ck.Path, rel) + ": " + detail
		} else if rel == "." {
			detail = ck.Path + ": " + detail
		}
	}
	switch {
	case errors.Is(err, loader.ErrNoWeights):
		w.Status = WeightsMissing
		w.Problem = fmt.Sprintf("%s not found (nor %s) — %s",
			filepath.Join(ck.Path, loader.SingleFileName), loader.IndexName, downloadHint(ck))
	case errors.Is(err, loader.ErrMissingShards), errors.Is(err, loader.ErrLFSPointer), errors.Is(err, fs.ErrNotExist):
		// The loader's detail says what to do; a known repository gives
		// the exact command.
		w.Status = WeightsMissing
		w.Problem = detail
		if ck.Repo != "" {
			w.Problem += " — " + downloadHint(ck)
		}
	default:
		w.Problem = detail
	}
	return w
}
