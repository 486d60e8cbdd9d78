package tokenizer

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"
)

//go:embed small_corpus.txt
var smallCorpus string

// DefaultTrainingText returns the built-in training text of BuildSmallBPE: a
// few kilobytes of English prose, Go and Python code, JSON, a ChatML
// conversation, Chinese, emoji, accented words, numbers and whitespace runs.
func DefaultTrainingText() string { return smallCorpus }

// SmallBPEOptions configures BuildSmallBPE.
type SmallBPEOptions struct {
	// VocabSize is the number of ids, special tokens included: the ids run
	// from 0 to VocabSize-1 without gaps. It must be at least 256 plus the
	// number of special tokens.
	VocabSize int
	// SpecialTokens are added as special tokens with the last ids, in order.
	// Nil means "<|endoftext|>", "<|im_start|>", "<|im_end|>".
	SpecialTokens []string
	// EOSTokens are the special tokens that end generation, written to
	// generation_config.json (all of them) and tokenizer_config.json (the
	// first). Nil means those of "<|im_end|>" and "<|endoftext|>" that are
	// special tokens.
	EOSTokens []string
	// ChatTemplate is written to tokenizer_config.json. Empty means a plain
	// ChatML template when the special tokens include "<|im_start|>" and
	// "<|im_end|>", and no template otherwise.
	ChatTemplate string
}

// SmallBPE is a synthetic checkpoint tokenizer: the contents of the three
// files LoadDir reads.
type SmallBPE struct {
	TokenizerJSON        []byte // tokenizer.json
	TokenizerConfigJSON  []byte // tokenizer_config.json
	GenerationConfigJSON []byte // generation_config.json
}

// WriteDir writes the files into dir, creating it if needed.
func (s *SmallBPE) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	for name, data := range map[string][]byte{
		TokenizerFile:        s.TokenizerJSON,
		TokenizerConfigFile:  s.TokenizerConfigJSON,
		GenerationConfigFile: s.GenerationConfigJSON,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("tokenizer: %w", err)
		}
	}
	return nil
}

// chatML is the template written when the caller gives none.
const chatML = "{%- for message in messages %}" +
	"{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}" +
	"{%- endfor %}" +
	"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"

// BuildSmallBPE trains a byte-level BPE tokenizer on text (DefaultTrainingText
// if empty) and returns it as checkpoint files in the Qwen3 layout: NFC, the
// Qwen2/Qwen3 split pattern, ByteLevel, a BPE model with ids 0..255 for the
// bytes (id b is byte b) and merges in the order learned, then the special
// tokens. Training is deterministic: each step merges the most frequent
// adjacent pair, the smaller (left id, right id) winning ties, until the
// vocabulary has opts.VocabSize ids. If the text runs out of pairs first (the
// default text gives about 1,500 tokens), the rest are filler merges of a
// token and a byte, so any size works.
func BuildSmallBPE(text string, opts SmallBPEOptions) (*SmallBPE, error) {
	if text == "" {
		text = smallCorpus
	}
	specials := opts.SpecialTokens
	if specials == nil {
		specials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
	}
	seen := map[string]bool{}
	for _, s := range specials {
		if s == "" || seen[s] {
			return nil, fmt.Errorf("tokenizer: special tokens must be distinct and non-empty, got %q", specials)
		}
		seen[s] = true
	}
	eosTokens := opts.EOSTokens
	if eosTokens == nil {
		for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
			if seen[s] {
				eosTokens = append(eosTokens, s)
			}
		}
	}
	for _, s := range eosTokens {
		if !seen[s] {
			return nil, fmt.Errorf("tokenizer: EOS token %q is not one of the special tokens %q", s, specials)
		}
	}
	modelSize := opts.VocabSize - len(specials)
	if modelSize < 256 {
		return nil, fmt.Errorf("tokenizer: vocabulary size %d is too small: the 256 byte tokens and %d special tokens need %d",
			opts.VocabSize, len(specials), 256+len(specials))
	}

	vocab, merges, err := trainBPE(text, specials, modelSize)
	if err != nil {
		return nil, err
	}
	specialID := func(s string) int { return modelSize + slices.Index(specials, s) }

	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, s := range specials {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}",
			modelSize+i, jsonString(s))
	}
	b.WriteString("\n  ],\n  \"normalizer\": {\"type\": \"NFC\"},\n")
	fmt.Fprintf(&b, "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": false}, ", jsonString(patternQwen2))
	b.WriteString("{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}]},\n")
	b.WriteString("  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false},\n")
	b.WriteString("  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false},\n")
	b.WriteString("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": \"\",\n    \"end_of_word_suffix\": \"\",\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {")
	for id, tok := range vocab {
		if id > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n      %s: %d", jsonString(tok), id)
	}
	b.WriteString("\n    },\n    \"merges\": [")
	for i, m := range merges {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n      [%s, %s]", jsonString(vocab[m[0]]), jsonString(vocab[m[1]]))
	}
	b.WriteString("\n    ]\n  }\n}\n")

	out := &SmallBPE{TokenizerJSON: b.Bytes()}

	cfg := map[string]any{
		"add_bos_token":                false,
		"add_prefix_space":             false,
		"bos_token":                    nil,
		"clean_up_tokenization_spaces": false,
		"errors":                       "replace",
		"model_max_length":             32768,
		"pad_token":                    nil,
		"split_special_tokens":         false,
		"tokenizer_class":              "Qwen2Tokenizer",
		"unk_token":                    nil,
		"eos_token":                    nil,
	}
	if len(eosTokens) > 0 {
		cfg["eos_token"] = eosTokens[0]
	}
	if seen["<|endoftext|>"] {
		cfg["pad_token"] = "<|endoftext|>"
	}
	template := opts.ChatTemplate
	if template == "" && seen["<|im_start|>"] && seen["<|im_end|>"] {
		template = chatML
	}
	if template != "" {
		cfg["chat_template"] = template
	}
	if out.TokenizerConfigJSON, err = marshalFile(cfg); err != nil {
		return nil, err
	}
	gen := map[string]any{"eos_token_id": nil}
	var eosIDs []int
	for _, s := range eosTokens {
		eosIDs = append(eosIDs, specialID(s))
	}
	if len(eosIDs) > 0 {
		gen["eos_token_id"] = eosIDs
	}
	if out.GenerationConfigJSON, err = marshalFile(gen); err != nil {
		return nil, err
	}
	return out, nil
}

// trainBPE learns merges from text until the model vocabulary has size
// tokens. It returns the vocabulary (index = id, tokens in byte-level
// spelling) and the merges as pairs of ids, in rank order.
func trainBPE(text string, specials []string, size int) ([]string, [][2]int32, error) {
	vocab := make([]string, 256, size)
	index := make(map[string]int32, size)
	for b := 0; b < 256; b++ {
		vocab[b] = string(byteToRune[b])
		index[vocab[b]] = int32(b)
	}

	// Words of the training text (special tokens cut out), with counts, in
	// first-seen order so that every later step is deterministic.
	counts := map[string]int{}
	var order []string
	addWords := func(s string) {
		s = norm.NFC.String(s)
		for i := 0; i < len(s); {
			j := splitFuncs[patternQwen2](s, i)
			w := s[i:j]
			if counts[w] == 0 {
				order = append(order, w)
			}
			counts[w]++
			i = j
		}
	}
	rest := text
	for rest != "" {
		cut, n := len(rest), 0
		for _, s := range specials {
			if k := strings.Index(rest, s); k >= 0 && k < cut {
				cut, n = k, len(s)
			}
		}
		addWords(rest[:cut])
		rest = rest[cut+n:]
	}
	words := make([][]int32, len(order))
	freq := make([]int, len(order))
	for i, w := range order {
		for k := 0; k < len(w); k++ {
			words[i] = append(words[i], int32(w[k]))
		}
		freq[i] = counts[w]
	}

	var merges [][2]int32
	for len(vocab) < size {
		pairs := map[[2]int32]int{}
		for i, w := range words {
			for k := 0; k+1 < len(w); k++ {
				pairs[[2]int32{w[k], w[k+1]}] += freq[i]
			}
		}
		if len(pairs) == 0 {
			break
		}
		var best [2]int32
		bestCount := 0
		for p, c := range pairs {
			if c > bestCount || (c == bestCount && (p[0] < best[0] || (p[0] == best[0] && p[1] < best[1]))) {
				best, bestCount = p, c
			}
		}
		merged := vocab[best[0]] + vocab[best[1]]
		id, ok := index[merged]
		if !ok {
			id = int32(len(vocab))
			vocab = append(vocab, merged)
			index[merged] = id
		}
		merges = append(merges, best)
		for i, w := range words {
			out := w[:0]
			for k := 0; k < len(w); k++ {
				if k+1 < len(w) && w[k] == best[0] && w[k+1] == best[1] {
					out = append(out, id)
					k++
					continue
				}
				out = append(out, w[k])
			}
			words[i] = out
		}
	}
	// The text is exhausted: fill up with merges of a token and a byte, in
	// id order, that make new tokens. They are valid merges that the text
	// never exercised, so they fire only on text unlike the training text.
	for left := int32(0); len(vocab) < size; left++ {
		for b := int32(0); b < 256 && len(vocab) < size; b++ {
			merged := vocab[left] + vocab[b]
			if _, ok := index[merged]; ok {
				continue
			}
			index[merged] = int32(len(vocab))
			vocab = append(vocab, merged)
			merges = append(merges, [2]int32{left, b})
		}
	}
	return vocab, merges, nil
}

// jsonString returns s as a JSON string literal, with non-ASCII characters
// kept as they are (as Hugging Face writes them).
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}

// marshalFile returns v as indented JSON with a final newline.
func marshalFile(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return b.Bytes(), nil
}
