package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// edit returns the committed synthetic tokenizer.json with change applied to
// its decoded JSON.
func edit(t testing.TB, change func(f map[string]any)) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(smallDir, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	change(f)
	out, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func model(f map[string]any) map[string]any { return f["model"].(map[string]any) }

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name        string
		change      func(f map[string]any)
		raw         string // used instead of change when set
		field       string // FormatError.Field
		msg         string // in the message
		unsupported bool
	}{
		{name: "syntax error", raw: "{\n  \"model\": [1,\n", msg: "line 3", field: ""},
		{name: "not an object", raw: "[]", msg: "not a valid tokenizer.json"},
		{name: "unknown version", change: func(f map[string]any) { f["version"] = "2.0" }, field: "version", unsupported: true},
		{name: "no model", change: func(f map[string]any) { delete(f, "model") }, field: "model", msg: "missing"},
		{name: "unigram model", change: func(f map[string]any) { model(f)["type"] = "Unigram" }, field: "model.type", msg: `"Unigram"`, unsupported: true},
		{name: "dropout", change: func(f map[string]any) { model(f)["dropout"] = 0.1 }, field: "model.dropout", unsupported: true},
		{name: "empty vocab", change: func(f map[string]any) { model(f)["vocab"] = map[string]any{} }, field: "model.vocab", msg: "empty"},
		{name: "negative id", change: func(f map[string]any) { model(f)["vocab"].(map[string]any)["zz"] = -1 }, field: "model.vocab", msg: "outside"},
		{name: "huge id", change: func(f map[string]any) { model(f)["vocab"].(map[string]any)["zz"] = 1 << 30 }, field: "model.vocab", msg: "outside"},
		{name: "shared id", change: func(f map[string]any) { model(f)["vocab"].(map[string]any)["zz"] = 5 }, field: "model.vocab", msg: "share id 5"},
		{name: "merge of unknown token", change: func(f map[string]any) { model(f)["merges"].([]any)[3] = []any{"nope", "a"} }, field: "model.merges[3]", msg: `"nope"`},
		{name: "merge result not in vocab", change: func(f map[string]any) { model(f)["merges"].([]any)[0] = []any{"Q", "Z"} }, field: "model.merges[0]", msg: `merged token "QZ"`},
		{name: "legacy merge with three parts", change: func(f map[string]any) { model(f)["merges"] = []any{"a b c"} }, field: "model.merges[0]", msg: "not a pair"},
		{name: "merge of one token", change: func(f map[string]any) { model(f)["merges"] = []any{[]any{"a"}} }, field: "model.merges[0]", msg: "not a pair"},
		{name: "unk token not in vocab", change: func(f map[string]any) { model(f)["unk_token"] = "<unk>" }, field: "model.unk_token"},
		{name: "lowercase normalizer", change: func(f map[string]any) { f["normalizer"] = map[string]any{"type": "Lowercase"} }, field: "normalizer.type", unsupported: true},
		{name: "no pre-tokenizer", change: func(f map[string]any) { f["pre_tokenizer"] = nil }, field: "pre_tokenizer", unsupported: true},
		{name: "whitespace pre-tokenizer", change: func(f map[string]any) { f["pre_tokenizer"] = map[string]any{"type": "Whitespace"} }, field: "pre_tokenizer.type", unsupported: true},
		{name: "unknown split regex", change: func(f map[string]any) {
			f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\w+`}
		}, field: "pre_tokenizer.pretokenizers[0].pattern.Regex", unsupported: true},
		{name: "split without byte level", change: func(f map[string]any) {
			f["pre_tokenizer"] = f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0]
		}, field: "pre_tokenizer", msg: "no ByteLevel", unsupported: true},
		{name: "split behavior", change: func(f map[string]any) {
			f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "Removed"
		}, field: "pre_tokenizer.pretokenizers[0].behavior", unsupported: true},
		{name: "byte level first", change: func(f map[string]any) {
			p := f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)
			p[0], p[1] = p[1], p[0]
		}, field: "pre_tokenizer", msg: "last step", unsupported: true},
		{name: "wordpiece decoder", change: func(f map[string]any) { f["decoder"] = map[string]any{"type": "WordPiece"} }, field: "decoder.type", unsupported: true},
		{name: "template post-processor", change: func(f map[string]any) { f["post_processor"] = map[string]any{"type": "TemplateProcessing"} }, field: "post_processor.type", unsupported: true},
		{name: "template post-processor adding BOS", change: func(f map[string]any) {
			f["post_processor"] = map[string]any{"type": "TemplateProcessing", "single": []any{
				map[string]any{"SpecialToken": map[string]any{"id": "<|im_start|>", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
			}}
		}, field: "post_processor.type", msg: "would add tokens", unsupported: true},
		{name: "template post-processor adding EOS in a sequence", change: func(f map[string]any) {
			f["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
				map[string]any{"type": "ByteLevel"},
				map[string]any{"type": "TemplateProcessing", "single": []any{
					map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
					map[string]any{"SpecialToken": map[string]any{"id": "<|im_end|>", "type_id": 0}},
				}},
			}}
		}, field: "post_processor.processors[1].type", msg: "would add tokens", unsupported: true},
		{name: "component without type", change: func(f map[string]any) { f["decoder"] = map[string]any{} }, field: "decoder.type", msg: "missing"},
		{name: "added token without id", change: func(f map[string]any) {
			delete(f["added_tokens"].([]any)[0].(map[string]any), "id")
		}, field: "added_tokens[0].id"},
		{name: "added token on a model id", change: func(f map[string]any) {
			f["added_tokens"].([]any)[0].(map[string]any)["id"] = 7
		}, field: "added_tokens[0].id", msg: "model's token"},
		{name: "added tokens sharing an id", change: func(f map[string]any) {
			f["added_tokens"].([]any)[1].(map[string]any)["id"] = 509
		}, field: "added_tokens[1].id", msg: "also added token"},
		{name: "added token leaving a gap", change: func(f map[string]any) {
			// The tokenizers library would number it 512 (checked with 0.23.3).
			gap := map[string]any{"id": 600, "content": "<gap>", "special": true}
			f["added_tokens"] = append(f["added_tokens"].([]any), gap)
		}, field: "added_tokens[3].id", msg: "numbers it 512"},
		{name: "added token twice", change: func(f map[string]any) {
			a := f["added_tokens"].([]any)
			dup := map[string]any{"id": 600, "content": "<|im_end|>", "special": true}
			f["added_tokens"] = append(a, dup)
		}, field: "added_tokens[3].content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.raw)
			if tt.raw == "" {
				data = edit(t, tt.change)
			}
			_, err := Parse(data, "test/tokenizer.json")
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			if fe.File != "test/tokenizer.json" || fe.Field != tt.field {
				t.Errorf("error names %q field %q, want file test/tokenizer.json field %q (%v)", fe.File, fe.Field, tt.field, err)
			}
			if !strings.Contains(err.Error(), tt.msg) || !strings.HasPrefix(err.Error(), "test/tokenizer.json") {
				t.Errorf("error %q should start with the file and mention %q", err, tt.msg)
			}
			if got := errors.Is(err, ErrUnsupported); got != tt.unsupported {
				t.Errorf("errors.Is(err, ErrUnsupported) = %v, want %v (%v)", got, tt.unsupported, err)
			}
		})
	}
}

// noOpTemplate is the post-processor transformers 5 writes whenever it saves
// a tokenizer that adds no special tokens (checked with transformers 5.25:
// AutoTokenizer.from_pretrained then save_pretrained of models/go-tiny, whose
// post_processor is null, and mlx_lm.convert, which saves the tokenizer so):
// the single sequence is $A alone, so it adds nothing.
var noOpTemplate = map[string]any{
	"type":   "TemplateProcessing",
	"single": []any{map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
	"pair": []any{
		map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
		map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}},
	},
	"special_tokens": map[string]any{},
}

// TestParseNoOpTemplatePostProcessor: a TemplateProcessing whose single
// template is only the sequence adds no token (the tokenizers library applies
// the template as written), so such a tokenizer encodes exactly as without a
// post-processor; refusing it made every checkpoint saved by transformers 5
// (mlx_lm.convert's output included) fail to load.
func TestParseNoOpTemplatePostProcessor(t *testing.T) {
	plain, err := Parse(edit(t, func(f map[string]any) { f["post_processor"] = nil }), "plain")
	if err != nil {
		t.Fatal(err)
	}
	for name, pp := range map[string]any{
		"template":                 noOpTemplate,
		"byte level then template": map[string]any{"type": "Sequence", "processors": []any{map[string]any{"type": "ByteLevel"}, noOpTemplate}},
	} {
		t.Run(name, func(t *testing.T) {
			tok, err := Parse(edit(t, func(f map[string]any) { f["post_processor"] = pp }), "variant")
			if err != nil {
				t.Fatal(err)
			}
			text := "<|im_start|>user\nHello  world\n\tcafé 123<|im_end|>"
			got, want := tok.Encode(text, EncodeOptions{}), plain.Encode(text, EncodeOptions{})
			if len(got) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("ids %v, want %v (as without a post-processor)", got, want)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.json"))
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "nope.json") {
		t.Fatalf("Load of a missing file: %v", err)
	}
}

// TestParseAccepts checks variants that must load: the plain ByteLevel
// pre-tokenizer with GPT-2's regex, a Sequence normalizer, no normalizer,
// legacy "#version" lines are not special (HF skips them only in merges.txt).
func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name   string
		change func(f map[string]any)
	}{
		{"gpt2 byte level", func(f map[string]any) {
			f["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false}
		}},
		{"byte level with prefix space", func(f map[string]any) {
			f["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}
		}},
		{"sequence normalizer", func(f map[string]any) {
			f["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}}}
		}},
		{"no normalizer", func(f map[string]any) { f["normalizer"] = nil }},
		{"no post-processor", func(f map[string]any) { f["post_processor"] = nil }},
		{"qwen3.5 pattern", func(f map[string]any) {
			f["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": patternQwen35}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Parse(edit(t, tt.change), "variant")
			if err != nil {
				t.Fatal(err)
			}
			text := "Hello  world\n\tcafé 123"
			got, err := tok.Decode(tok.Encode(text, EncodeOptions{}), false)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimPrefix(got, " ") != text {
				t.Errorf("round trip = %q, want %q", got, text)
			}
		})
	}
}
