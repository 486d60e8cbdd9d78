package loader

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// shardedFolder writes a two-shard checkpoint with an index, a config, a
// tokenizer and a stray consolidated file the index does not name.
func shardedFolder(t *testing.T, index string) string {
	dir := t.TempDir()
	writeST(t, dir, "model-00001-of-00002.safetensors", []Tensor{f32("model.embed.weight", 4, 2), f32("model.norm.weight", 2), f32("stale.in.shard1", 1)}, map[string]string{"format": "pt"})
	writeST(t, dir, "model-00002-of-00002.safetensors", []Tensor{f32("lm_head.weight", 4, 2), f32("model.norm.weight", 2)}, nil)
	writeST(t, dir, "consolidated.safetensors", []Tensor{f32("leak", 1)}, nil)
	writeFile(t, dir, IndexName, []byte(index))
	writeFile(t, dir, "config.json", []byte(`{"architectures":["TinyForCausalLM","Other"],"model_type":"tiny","hidden_size":2}`))
	writeFile(t, dir, "generation_config.json", []byte(`{}`))
	writeFile(t, dir, "tokenizer.json", []byte(`{}`))
	writeFile(t, dir, "chat_template.jinja", []byte(`{{ messages }}`))
	return dir
}

const tinyIndex = `{"metadata":{"total_size":72},"weight_map":{
	"model.embed.weight":"model-00001-of-00002.safetensors",
	"model.norm.weight":"model-00002-of-00002.safetensors",
	"lm_head.weight":"model-00002-of-00002.safetensors"}}`

func TestOpenShardedCheckpoint(t *testing.T) {
	logs := captureLogs(t)
	dir := shardedFolder(t, tinyIndex)
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var names []string
	for _, ti := range c.Tensors() {
		names = append(names, ti.Name)
	}
	// Shard order, then offset order; the index decides which copy of
	// model.norm.weight counts, and the stray files are ignored.
	want := []string{"model.embed.weight", "lm_head.weight", "model.norm.weight"}
	if !slices.Equal(names, want) {
		t.Errorf("tensors %q, want %q", names, want)
	}
	norm, _ := c.Tensor("model.norm.weight")
	if filepath.Base(norm.Path) != "model-00002-of-00002.safetensors" {
		t.Errorf("model.norm.weight resolved to %s, want the shard the index names", norm.Path)
	}
	if _, ok := c.Tensor("leak"); ok {
		t.Error("a tensor of a file outside the index leaked in")
	}
	if got, err := c.Bytes("lm_head.weight"); err != nil || !slices.Equal(got, f32("x", 4, 2).Data) {
		t.Errorf("Bytes = %x, %v", got, err)
	}
	if c.Index != filepath.Join(dir, IndexName) || len(c.Shards()) != 2 {
		t.Errorf("Index %q, %d shards", c.Index, len(c.Shards()))
	}
	if c.Config == nil || c.Config.Architecture != "TinyForCausalLM" || c.Config.ModelType != "tiny" || !strings.Contains(string(c.Config.Raw), "hidden_size") {
		t.Errorf("Config = %+v", c.Config)
	}
	f := c.Files
	if f.GenerationConfig == "" || f.Tokenizer == "" || filepath.Base(f.ChatTemplate) != "chat_template.jinja" || f.TokenizerConfig != "" || f.Vocab != "" || f.Merges != "" {
		t.Errorf("Files = %+v", f)
	}
	if !strings.Contains(logs.String(), "not mapped to this shard") || !strings.Contains(logs.String(), "stale.in.shard1") {
		t.Errorf("no debug log for ignored shard tensors:\n%s", logs)
	}
	if strings.Contains(logs.String(), "total_size") {
		t.Errorf("total_size warning for a correct total:\n%s", logs)
	}
}

func TestTotalSizeMismatchIsOnlyAWarning(t *testing.T) {
	logs := captureLogs(t)
	c, err := OpenCheckpoint(shardedFolder(t, strings.Replace(tinyIndex, `"total_size":72`, `"total_size":99`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "total_size=99 tensor_bytes=72") {
		t.Errorf("no warning:\n%s", logs)
	}
}

func TestTotalSizeNotAByteCountIsOnlyAWarning(t *testing.T) {
	logs := captureLogs(t)
	c, err := OpenCheckpoint(shardedFolder(t, strings.Replace(tinyIndex, `"total_size":72`, `"total_size":"72 bytes"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Tensors()) == 0 || !strings.Contains(logs.String(), "level=WARN") ||
		!strings.Contains(logs.String(), `total_size ignored`) || !strings.Contains(logs.String(), `not a number but the string`) {
		t.Errorf("%d tensors; want the checkpoint open and one warning:\n%s", len(c.Tensors()), logs)
	}
}

func TestOpenCheckpointByIndexPath(t *testing.T) {
	dir := shardedFolder(t, `{"weight_map":{}}`) // the standard index is empty
	custom := writeFile(t, dir, "model-fp32.safetensors.index.json", []byte(tinyIndex))
	c, err := OpenCheckpoint(custom)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Dir != dir || c.Index != custom || len(c.Tensors()) != 3 || c.Config == nil {
		t.Errorf("Dir %q Index %q, %d tensors, config %v", c.Dir, c.Index, len(c.Tensors()), c.Config)
	}
}

func TestOpenSingleFileCheckpointWithoutConfig(t *testing.T) {
	dir := t.TempDir()
	writeST(t, dir, SingleFileName, []Tensor{f32("w", 2)}, nil)
	writeST(t, dir, "consolidated.safetensors", []Tensor{f32("leak", 1)}, nil)
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Index != "" || c.Config != nil || len(c.Tensors()) != 1 || (c.Files != Files{}) {
		t.Errorf("Index %q, Config %v, tensors %v, files %+v", c.Index, c.Config, c.Tensors(), c.Files)
	}
	if r, err := c.Reader("w"); err != nil || r.Size() != 8 {
		t.Errorf("Reader: %v", err)
	}
	if _, err := c.Bytes("leak"); !errors.Is(err, ErrTensorNotFound) {
		t.Errorf("Bytes(leak) err = %v", err)
	}
}

// The Hugging Face cache keeps snapshot files as symlinks into a blobs folder
// outside the snapshot; the lexical path check must not refuse them.
func TestShardSymlinkOutsideTheFolderIsFollowed(t *testing.T) {
	root := t.TempDir()
	blob := writeST(t, filepath.Join(root, "blobs"), "4d7a2146", []Tensor{f32("w", 2)}, nil)
	snap := filepath.Join(root, "snapshots", "abc")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(blob, filepath.Join(snap, "model-00001-of-00001.safetensors")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, snap, IndexName, []byte(`{"weight_map":{"w":"model-00001-of-00001.safetensors"}}`))
	c, err := OpenCheckpoint(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.Tensor("w"); !ok {
		t.Error("tensor behind a symlink not found")
	}
}

func TestOpenCheckpointRefuses(t *testing.T) {
	t.Run("a shard that is a folder", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, IndexName, []byte(`{"weight_map":{"w":"m.safetensors"}}`))
		os.Mkdir(filepath.Join(dir, "m.safetensors"), 0o755)
		_, err := OpenCheckpoint(dir)
		if !errors.Is(err, ErrMissingShards) || !strings.Contains(err.Error(), "m.safetensors (not a regular file)") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a malformed config.json", func(t *testing.T) {
		dir := t.TempDir()
		writeST(t, dir, SingleFileName, []Tensor{f32("w", 2)}, nil)
		writeFile(t, dir, "config.json", []byte(`{"architectures":"X"}`))
		_, err := OpenCheckpoint(dir)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `config.json: malformed config (fix it or download it again): line 1, column 20: field "architectures" is a string, want a list of strings`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a safetensors file instead of a folder", func(t *testing.T) {
		p := writeST(t, t.TempDir(), "x.safetensors", []Tensor{f32("w", 2)}, nil)
		_, err := OpenCheckpoint(p)
		if !errors.Is(err, ErrNoWeights) || !strings.Contains(err.Error(), "open a single .safetensors file with Open") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("an empty folder", func(t *testing.T) {
		_, err := OpenCheckpoint(t.TempDir())
		if !errors.Is(err, ErrNoWeights) || !strings.Contains(err.Error(), "*.safetensors found: none") {
			t.Fatalf("err = %v", err)
		}
	})
}
