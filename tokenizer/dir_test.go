package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// checkpoint makes a folder holding the synthetic tokenizer.json and the
// given extra files.
func checkpoint(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(smallDir, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	files[TokenizerFile] = string(data)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadDir(t *testing.T) {
	// Ids in testdata/small: <|endoftext|> 509, <|im_start|> 510, <|im_end|> 511.
	tests := []struct {
		name     string
		files    map[string]string
		eos      []int32
		template string
	}{
		{"no config files", map[string]string{}, nil, ""},
		{"eos list", map[string]string{GenerationConfigFile: `{"eos_token_id": [511, 509, 511]}`}, []int32{509, 511}, ""},
		{"eos id", map[string]string{GenerationConfigFile: `{"eos_token_id": 509}`}, []int32{509}, ""},
		{"eos null", map[string]string{GenerationConfigFile: `{"eos_token_id": null, "bos_token_id": 1}`}, nil, ""},
		{"union of both files", map[string]string{
			GenerationConfigFile: `{"eos_token_id": 509}`,
			TokenizerConfigFile:  `{"eos_token": "<|im_end|>", "chat_template": "T"}`,
		}, []int32{509, 511}, "T"},
		{"eos token object", map[string]string{
			TokenizerConfigFile: `{"eos_token": {"__type": "AddedToken", "content": "<|endoftext|>", "special": true}}`,
		}, []int32{509}, ""},
		// Without generation_config.json, transformers builds the generation
		// config from config.json (GenerationConfig.from_model_config, 5.17):
		// the top-level eos_token_id, else text_config's; mlx-lm reads the
		// top-level one too.
		{"config eos without generation config", map[string]string{
			ConfigFile: `{"eos_token_id": [509, 510], "text_config": {"eos_token_id": 511}}`,
		}, []int32{509, 510}, ""},
		{"text config eos without generation config", map[string]string{
			ConfigFile: `{"eos_token_id": null, "text_config": {"eos_token_id": 511}}`,
		}, []int32{511}, ""},
		{"config eos plus tokenizer eos", map[string]string{
			ConfigFile:          `{"text_config": {"eos_token_id": 509}}`,
			TokenizerConfigFile: `{"eos_token": "<|im_end|>"}`,
		}, []int32{509, 511}, ""},
		{"generation config wins over config", map[string]string{
			GenerationConfigFile: `{"eos_token_id": 510}`,
			ConfigFile:           `{"eos_token_id": 509, "text_config": {"eos_token_id": 511}}`,
		}, []int32{510}, ""},
		{"named templates", map[string]string{
			TokenizerConfigFile: `{"chat_template": [{"name": "tool_use", "template": "A"}, {"name": "default", "template": "B"}]}`,
		}, nil, "B"},
		{"jinja file wins", map[string]string{
			TokenizerConfigFile: `{"chat_template": "old", "eos_token": null}`,
			ChatTemplateFile:    "new {{ x }}",
		}, nil, "new {{ x }}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := LoadDir(checkpoint(t, tt.files))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.EOS, tt.eos) {
				t.Errorf("EOS = %v, want %v", d.EOS, tt.eos)
			}
			for _, id := range []int32{508, 509, 510, 511} {
				if got, want := d.IsEOS(id), slices.Contains(tt.eos, id); got != want {
					t.Errorf("IsEOS(%d) = %v, want %v", id, got, want)
				}
			}
			if d.ChatTemplate != tt.template {
				t.Errorf("ChatTemplate = %q, want %q", d.ChatTemplate, tt.template)
			}
			if d.Tokenizer.VocabSize() != smallVocab {
				t.Errorf("VocabSize = %d", d.Tokenizer.VocabSize())
			}
		})
	}
}

func TestLoadDirErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings of the error
	}{
		{"unknown eos token", map[string]string{TokenizerConfigFile: `{"eos_token": "</s>"}`},
			[]string{TokenizerConfigFile, "eos_token", `"</s>"`}},
		{"eos token of wrong type", map[string]string{TokenizerConfigFile: `{"eos_token": 3}`},
			[]string{TokenizerConfigFile, "eos_token"}},
		{"eos id of wrong type", map[string]string{GenerationConfigFile: `{"eos_token_id": "2"}`},
			[]string{GenerationConfigFile, "eos_token_id"}},
		{"negative eos id", map[string]string{GenerationConfigFile: `{"eos_token_id": [-1]}`},
			[]string{GenerationConfigFile, "eos_token_id", "-1"}},
		{"malformed generation config", map[string]string{GenerationConfigFile: "{\n\"eos_token_id\": ,}"},
			[]string{GenerationConfigFile, "line 2"}},
		{"config eos id of wrong type", map[string]string{ConfigFile: `{"text_config": {"eos_token_id": "2"}}`},
			[]string{ConfigFile, "text_config.eos_token_id"}},
		{"templates without default", map[string]string{TokenizerConfigFile: `{"chat_template": [{"name": "x", "template": "y"}]}`},
			[]string{TokenizerConfigFile, "chat_template", "default"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadDir(checkpoint(t, tt.files))
			if err == nil {
				t.Fatal("LoadDir succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestGenerationEOS: the EOS ids of a folder without tokenizer.json (a
// token-id prompt still ends at them, as transformers' generate does).
func TestGenerationEOS(t *testing.T) {
	dir := t.TempDir()
	if ids, err := GenerationEOS(dir); err != nil || ids != nil {
		t.Errorf("empty folder: %v, %v", ids, err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(ConfigFile, `{"text_config": {"eos_token_id": 7}}`)
	if ids, err := GenerationEOS(dir); err != nil || !slices.Equal(ids, []int32{7}) {
		t.Errorf("config.json only: %v, %v; want [7]", ids, err)
	}
	write(GenerationConfigFile, `{"eos_token_id": [9, 8, 9]}`)
	if ids, err := GenerationEOS(dir); err != nil || !slices.Equal(ids, []int32{8, 9}) {
		t.Errorf("with generation_config.json: %v, %v; want [8 9]", ids, err)
	}
}

func TestLoadDirWithoutTokenizer(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadDir(dir)
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), TokenizerFile) {
		t.Fatalf("LoadDir of an empty folder: %v", err)
	}
	var fe *FormatError
	if errors.As(err, &fe) {
		t.Errorf("a missing file is not a format error: %v", err)
	}
}

// TestLoadDirQwen3 reads the real Qwen3 files, with the generation config
// that Qwen3 checkpoints ship.
func TestLoadDirQwen3(t *testing.T) {
	qwen3Tokenizer(t)
	src := filepath.Dir(qwen3.path)
	dir := t.TempDir()
	for _, name := range []string{TokenizerFile, TokenizerConfigFile} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatalf("%v (run `make deps`)", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gen := `{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643}`
	if err := os.WriteFile(filepath.Join(dir, GenerationConfigFile), []byte(gen), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{151643, 151645}; !slices.Equal(d.EOS, want) {
		t.Errorf("EOS = %v, want %v", d.EOS, want)
	}
	if !strings.Contains(d.ChatTemplate, "<|im_start|>") {
		t.Errorf("chat template %.60q... lacks <|im_start|>", d.ChatTemplate)
	}
}
