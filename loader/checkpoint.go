package loader

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/specula-dev/specula/internal/jsonerr"
	"github.com/specula-dev/specula/mlx"
)

// SingleFileName is the weights file of an unsharded checkpoint.
const SingleFileName = "model.safetensors"

// Checkpoint is an open Hugging Face checkpoint folder: its weights (one
// model.safetensors, or the shards listed by model.safetensors.index.json),
// validated, plus what was found of its config, generation config and
// tokenizer files. Tensor data is not read until asked for.
type Checkpoint struct {
	// Dir is the checkpoint folder.
	Dir string
	// Index is the path of the index file, or "" for a single
	// model.safetensors.
	Index string
	// Config is the parsed config.json, or nil when the folder has none.
	Config *Config
	// Files lists the other recognised files of the folder.
	Files Files

	shards  []*File      // sorted by path
	tensors []TensorInfo // shard order, then offset order within a shard
	byName  map[string]int

	// Part's state (part.go): the shards opened for parts, and the lazy
	// arrays Arrays made, which PartOf knows until Close.
	partMu    sync.Mutex
	partFiles map[string]*mlx.TensorFile
	made      []*mlx.Array
}

// Config is a checkpoint's config.json: the raw document and the two fields
// every architecture lookup needs.
type Config struct {
	Path string
	// Raw is the whole document, for the architecture's own config parser.
	Raw json.RawMessage
	// Architecture is architectures[0] ("Qwen3_5ForCausalLM"), or "".
	Architecture string
	// ModelType is model_type ("qwen3_5_text"), or "".
	ModelType string
}

// Files holds the paths of the non-weight files a checkpoint folder may
// carry; a field is "" when the file is absent.
type Files struct {
	GenerationConfig string // generation_config.json
	Tokenizer        string // tokenizer.json
	TokenizerConfig  string // tokenizer_config.json
	SpecialTokensMap string // special_tokens_map.json
	Vocab            string // vocab.json
	Merges           string // merges.txt
	ChatTemplate     string // chat_template.jinja, else chat_template.json
}

// OpenCheckpoint opens the checkpoint at path: a folder, or an index file
// inside one (for an index not named model.safetensors.index.json). In a
// folder, an index decides the shards and any other *.safetensors file is
// ignored; without one, model.safetensors must exist (spec/safetensors.md
// section 5). Every shard is validated as Open does; every tensor of the
// index must be in its shard. A tensor in a shard but not in the index is
// ignored (debug log); a total_size that disagrees with the tensors, or is
// not a byte count, is a warning. Errors are *Error values (ErrNoWeights,
// ErrInvalidIndex, ErrInvalidShardPath, ErrMissingShards,
// ErrIndexTensorMissing, ErrInvalidConfig, or a shard's own rule) or file
// system errors.
func OpenCheckpoint(path string) (*Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: path}
	switch {
	case st.IsDir():
		idx := filepath.Join(path, IndexName)
		if ok, err := isRegular(idx); err != nil {
			return nil, err
		} else if ok {
			c.Index = idx
		}
	case strings.HasSuffix(path, ".index.json"):
		c.Dir, c.Index = filepath.Dir(path), path
	default:
		return nil, &Error{File: path, Kind: ErrNoWeights,
			Detail: "not a checkpoint folder or an index file: pass the folder (or its .index.json); open a single .safetensors file with Open"}
	}
	if err := c.openWeights(); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.readAux(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Tensors returns every tensor of the checkpoint: shard by shard (shards in
// name order), in offset order within a shard. The Shape slices are shared.
func (c *Checkpoint) Tensors() []TensorInfo { return slices.Clone(c.tensors) }

// Tensor returns the tensor called name; its Path says which shard holds it.
func (c *Checkpoint) Tensor(name string) (TensorInfo, bool) {
	i, ok := c.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return c.tensors[i], true
}

// Shards returns the open weight files, sorted by path. They belong to the
// Checkpoint: Close closes them.
func (c *Checkpoint) Shards() []*File { return slices.Clone(c.shards) }

// Bytes returns the bytes of the tensor called name, as File.Bytes does.
func (c *Checkpoint) Bytes(name string) ([]byte, error) {
	f, err := c.shardOf(name)
	if err != nil {
		return nil, err
	}
	return f.Bytes(name)
}

// Reader returns a reader over the bytes of the tensor called name, as
// File.Reader does.
func (c *Checkpoint) Reader(name string) (*io.SectionReader, error) {
	f, err := c.shardOf(name)
	if err != nil {
		return nil, err
	}
	return f.Reader(name)
}

func (c *Checkpoint) shardOf(name string) (*File, error) {
	t, ok := c.Tensor(name)
	if !ok {
		return nil, &Error{File: c.Dir, Tensor: name, Kind: ErrTensorNotFound, Detail: "no such tensor in the checkpoint"}
	}
	for _, f := range c.shards {
		if f.Path() == t.Path {
			return f, nil
		}
	}
	return nil, &Error{File: c.Dir, Tensor: name, Kind: ErrTensorNotFound, Detail: "shard " + t.Path + " is not open"}
}

// Close closes every shard. Arrays made from the checkpoint stay valid;
// PartOf no longer knows them.
func (c *Checkpoint) Close() error {
	c.closeParts()
	var errs []error
	for _, f := range c.shards {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// openWeights opens the shards of c.Index, or the single model.safetensors.
func (c *Checkpoint) openWeights() error {
	if c.Index == "" {
		single := filepath.Join(c.Dir, SingleFileName)
		ok, err := isRegular(single)
		if err != nil {
			return err
		}
		if !ok {
			return c.noWeights()
		}
		f, err := Open(single)
		if err != nil {
			return err
		}
		c.shards = []*File{f}
		c.tensors = f.Tensors()
		c.index()
		return nil
	}

	x, err := ReadIndex(c.Index)
	if err != nil {
		return err
	}
	indexName := filepath.Base(c.Index)
	var missing []string
	for _, s := range x.Shards() {
		st, err := os.Stat(filepath.Join(c.Dir, s)) // follows symlinks
		switch {
		case errors.Is(err, fs.ErrNotExist):
			missing = append(missing, s)
		case err != nil:
			return err
		case !st.Mode().IsRegular():
			missing = append(missing, s+" (not a regular file)")
		}
	}
	if len(missing) > 0 {
		return &Error{File: c.Dir, Kind: ErrMissingShards,
			Detail: fmt.Sprintf("checkpoint incomplete: missing shards %s (referenced by %s); download them again", strings.Join(missing, ", "), indexName)}
	}

	byShard := make(map[string]*File)
	for _, s := range x.Shards() {
		f, err := Open(filepath.Join(c.Dir, s))
		if err != nil {
			return err
		}
		c.shards = append(c.shards, f)
		byShard[s] = f
	}
	slices.SortFunc(c.shards, func(a, b *File) int { return cmp.Compare(a.Path(), b.Path()) })

	var absent []string
	for _, name := range slices.Sorted(maps.Keys(x.WeightMap)) {
		s := x.WeightMap[name]
		if _, ok := byShard[s].Tensor(name); !ok {
			absent = append(absent, fmt.Sprintf("%q (in %s)", name, s))
		}
	}
	if len(absent) > 0 {
		return &Error{File: c.Index, Kind: ErrIndexTensorMissing,
			Detail: fmt.Sprintf("%d indexed tensors are not in their shard's header: %s; the index does not belong to these shards: download the checkpoint again", len(absent), strings.Join(absent, ", "))}
	}

	var sum uint64
	for _, f := range c.shards {
		var ignored []string
		for _, t := range f.tensors {
			if filepath.Join(c.Dir, x.WeightMap[t.Name]) != f.Path() {
				ignored = append(ignored, t.Name) // the index decides
				continue
			}
			c.tensors = append(c.tensors, t)
			sum += uint64(t.Size)
		}
		if len(ignored) > 0 {
			slog.Debug("loader: shard tensors not mapped to this shard by the index are ignored",
				"shard", f.Path(), "count", len(ignored), "names", strings.Join(ignored[:min(len(ignored), 5)], ", "))
		}
	}
	if x.TotalSizeIgnored != "" {
		slog.Warn("loader: index total_size ignored", "index", c.Index, "reason", x.TotalSizeIgnored)
	}
	if x.HasTotalSize && x.TotalSize != sum {
		slog.Warn("loader: index total_size differs from the byte size of the indexed tensors",
			"index", c.Index, "total_size", x.TotalSize, "tensor_bytes", sum)
	}
	c.index()
	return nil
}

func (c *Checkpoint) index() {
	c.byName = make(map[string]int, len(c.tensors))
	for i, t := range c.tensors {
		c.byName[t.Name] = i
	}
}

// noWeights is the error for a folder with neither an index nor
// model.safetensors. It lists what *.safetensors files there are: we never
// merge files by globbing (stray files would leak tensors in).
func (c *Checkpoint) noWeights() error {
	found, _ := filepath.Glob(filepath.Join(c.Dir, "*.safetensors"))
	for i := range found {
		found[i] = filepath.Base(found[i])
	}
	list := "none"
	if len(found) > 0 {
		list = strings.Join(found, ", ")
	}
	return &Error{File: c.Dir, Kind: ErrNoWeights,
		Detail: fmt.Sprintf("no %s and no %s (*.safetensors found: %s); several shards need an index naming them: download the checkpoint's index, or rename a lone weights file to %s", IndexName, SingleFileName, list, SingleFileName)}
}

// readAux parses config.json and notes which other known files exist.
func (c *Checkpoint) readAux() error {
	cfgPath := filepath.Join(c.Dir, "config.json")
	raw, err := os.ReadFile(cfgPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		var v struct {
			Architectures []string `json:"architectures"`
			ModelType     string   `json:"model_type"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return &Error{File: cfgPath, Kind: ErrInvalidConfig, Detail: "malformed config (fix it or download it again)", Err: jsonerr.Explain(raw, err)}
		}
		c.Config = &Config{Path: cfgPath, Raw: raw, ModelType: v.ModelType}
		if len(v.Architectures) > 0 {
			c.Config.Architecture = v.Architectures[0]
		}
	}
	for _, f := range []struct {
		dst   *string
		names []string
	}{
		{&c.Files.GenerationConfig, []string{"generation_config.json"}},
		{&c.Files.Tokenizer, []string{"tokenizer.json"}},
		{&c.Files.TokenizerConfig, []string{"tokenizer_config.json"}},
		{&c.Files.SpecialTokensMap, []string{"special_tokens_map.json"}},
		{&c.Files.Vocab, []string{"vocab.json"}},
		{&c.Files.Merges, []string{"merges.txt"}},
		{&c.Files.ChatTemplate, []string{"chat_template.jinja", "chat_template.json"}},
	} {
		for _, name := range f.names {
			p := filepath.Join(c.Dir, name)
			if ok, _ := isRegular(p); ok {
				*f.dst = p
				break
			}
		}
	}
	return nil
}

// isRegular reports whether path is a regular file after following
// symlinks; a path that does not exist is not one.
func isRegular(path string) (bool, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return st.Mode().IsRegular(), nil
}
