package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/specula-dev/specula/internal/jsonerr"
)

// File names in a Hugging Face checkpoint folder.
const (
	// TokenizerFile is the tokenizer itself: model, normalizer,
	// pre-tokenizer, added tokens, decoder.
	TokenizerFile = "tokenizer.json"
	// TokenizerConfigFile holds transformers' settings: eos_token,
	// chat_template.
	TokenizerConfigFile = "tokenizer_config.json"
	// GenerationConfigFile holds generation defaults: eos_token_id.
	GenerationConfigFile = "generation_config.json"
	// ConfigFile is the model's configuration; its eos_token_id stands in
	// for a missing generation_config.json.
	ConfigFile = "config.json"
	// ChatTemplateFile is the chat template saved on its own, which newer
	// checkpoints ship instead of tokenizer_config.json's chat_template.
	ChatTemplateFile = "chat_template.jinja"
)

// Dir is a checkpoint folder's tokenizer together with what the folder's
// config files say about using it.
type Dir struct {
	// Tokenizer is read from tokenizer.json.
	Tokenizer *Tokenizer
	// EOS holds the ids that end generation, ascending and without repeats:
	// the union of GenerationEOS (generation_config.json's eos_token_id, an
	// id or a list, else config.json's) and the id of tokenizer_config.json's
	// eos_token. Empty if no file names one.
	EOS []int32
	// ChatTemplate is the Jinja chat template: chat_template.jinja if the
	// folder has it, else tokenizer_config.json's chat_template; empty if
	// neither has one.
	ChatTemplate string
}

// IsEOS reports whether id ends generation.
func (d *Dir) IsEOS(id int32) bool {
	_, found := slices.BinarySearch(d.EOS, id)
	return found
}

// LoadDir reads the tokenizer of a checkpoint folder: tokenizer.json (which
// must exist), tokenizer_config.json and generation_config.json (each
// optional; config.json stands in for the latter, see GenerationEOS), and
// chat_template.jinja (optional).
func LoadDir(dir string) (*Dir, error) {
	tok, err := Load(filepath.Join(dir, TokenizerFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("tokenizer: %s has no %s; a checkpoint folder needs the Hugging Face tokenizer file", dir, TokenizerFile)
		}
		return nil, err
	}
	d := &Dir{Tokenizer: tok}
	eos := map[int32]bool{}

	ids, err := GenerationEOS(dir)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		eos[id] = true
	}

	path := filepath.Join(dir, TokenizerConfigFile)
	if data, ok, err := readOptional(path); err != nil {
		return nil, err
	} else if ok {
		token, template, err := parseTokenizerConfig(data, path)
		if err != nil {
			return nil, err
		}
		if token != "" {
			id, ok := tok.TokenID(token)
			if !ok {
				return nil, fieldError(path, "eos_token", "%q is not a token of %s", token, TokenizerFile)
			}
			eos[id] = true
		}
		d.ChatTemplate = template
	}

	path = filepath.Join(dir, ChatTemplateFile)
	if data, ok, err := readOptional(path); err != nil {
		return nil, err
	} else if ok {
		d.ChatTemplate = string(data)
	}

	for id := range eos {
		d.EOS = append(d.EOS, id)
	}
	slices.Sort(d.EOS)
	return d, nil
}

// GenerationEOS returns the ids that end generation according to the model's
// configuration, ascending and without repeats: generation_config.json's
// eos_token_id when that file exists; without it config.json's top-level
// eos_token_id, else its text_config's, as transformers derives a missing
// generation config from the model config (mlx-lm reads the top-level one
// too). It needs no tokenizer, so a token-id prompt ends where generate's
// would; nil when no file names one.
func GenerationEOS(dir string) ([]int32, error) {
	var ids []int32
	path := filepath.Join(dir, GenerationConfigFile)
	data, ok, err := readOptional(path)
	switch {
	case err != nil:
		return nil, err
	case ok:
		if ids, err = parseGenerationEOS(data, path, ""); err != nil {
			return nil, err
		}
	default:
		path = filepath.Join(dir, ConfigFile)
		if data, ok, err = readOptional(path); err != nil || !ok {
			return nil, err
		}
		if ids, err = parseGenerationEOS(data, path, ""); err != nil || ids != nil {
			break
		}
		var cfg struct {
			TextConfig json.RawMessage `json:"text_config"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, &FormatError{File: path, Msg: "not valid JSON", Err: jsonerr.Explain(data, err)}
		}
		if !isNull(cfg.TextConfig) {
			ids, err = parseGenerationEOS(cfg.TextConfig, path, "text_config.")
		}
	}
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// readOptional reads a file that may be absent.
func readOptional(path string) ([]byte, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("tokenizer: %w", err)
	}
	return data, true, nil
}

// parseGenerationEOS reads eos_token_id from generation_config.json or
// config.json (an object of it, named in errors by prefix): an id, a list of
// ids, or null.
func parseGenerationEOS(data []byte, path, prefix string) ([]int32, error) {
	var cfg struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, &FormatError{File: path, Msg: "not valid JSON", Err: jsonerr.Explain(data, err)}
	}
	if isNull(cfg.EOS) {
		return nil, nil
	}
	var list []int64
	if bytes.HasPrefix(bytes.TrimSpace(cfg.EOS), []byte("[")) {
		if err := json.Unmarshal(cfg.EOS, &list); err != nil {
			return nil, fieldError(path, prefix+"eos_token_id", "must be an id or a list of ids, not %s", cfg.EOS)
		}
	} else {
		var one int64
		if err := json.Unmarshal(cfg.EOS, &one); err != nil {
			return nil, fieldError(path, prefix+"eos_token_id", "must be an id or a list of ids, not %s", cfg.EOS)
		}
		list = []int64{one}
	}
	ids := make([]int32, 0, len(list))
	for _, id := range list {
		if id < 0 || id > maxTokenID {
			return nil, fieldError(path, prefix+"eos_token_id", "id %d is outside 0..%d", id, maxTokenID)
		}
		ids = append(ids, int32(id))
	}
	return ids, nil
}

// parseTokenizerConfig reads eos_token (a string, {"content": ...} or null)
// and chat_template (a string, or a list of {"name", "template"} of which the
// one named "default" is taken) from tokenizer_config.json.
func parseTokenizerConfig(data []byte, path string) (eos, template string, err error) {
	var cfg struct {
		EOS          json.RawMessage `json:"eos_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", "", &FormatError{File: path, Msg: "not valid JSON", Err: jsonerr.Explain(data, err)}
	}
	if !isNull(cfg.EOS) {
		var obj struct {
			Content *string `json:"content"`
		}
		switch {
		case json.Unmarshal(cfg.EOS, &eos) == nil:
		case json.Unmarshal(cfg.EOS, &obj) == nil && obj.Content != nil:
			eos = *obj.Content
		default:
			return "", "", fieldError(path, "eos_token", "must be a string or {\"content\": string}, not %s", cfg.EOS)
		}
	}
	if !isNull(cfg.ChatTemplate) {
		var named []struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		switch {
		case json.Unmarshal(cfg.ChatTemplate, &template) == nil:
		case json.Unmarshal(cfg.ChatTemplate, &named) == nil:
			for _, n := range named {
				if n.Name == "default" {
					template = n.Template
				}
			}
			if template == "" {
				return "", "", fieldError(path, "chat_template", "a list of templates needs one named \"default\"")
			}
		default:
			return "", "", fieldError(path, "chat_template", "must be a string or a list of {\"name\", \"template\"}")
		}
	}
	return eos, template, nil
}
