// Package tokenizer reads Hugging Face tokenizer.json files for byte-level BPE
// tokenizers (GPT-2 style, as used by Qwen2, Qwen3 and Qwen3.5) and encodes and
// decodes text exactly as the Hugging Face tokenizers library does.
//
// Encoding follows the library's pipeline: added tokens (special or not) are
// found in the text first, longest first; the text between them is normalized
// (NFC, if the file asks for it), cut into words by the pre-tokenizer's split
// pattern, and each word's bytes are merged by BPE rank. Decoding maps tokens
// back to bytes and replaces invalid UTF-8 as the library does. A Stream
// decodes incrementally for generation, never splitting a character.
//
// LoadDir reads a checkpoint folder: tokenizer.json, plus the end-of-sequence
// tokens and chat template from tokenizer_config.json and
// generation_config.json. BuildSmallBPE makes small synthetic tokenizers for
// tests and demos.
//
// A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer encodes text to token ids and decodes ids to text.
type Tokenizer struct {
	name string // where it was read from, for messages

	model *bpeModel
	nfc   bool      // the normalizer is NFC
	steps []preStep // the pre-tokenizer pipeline, ByteLevel last

	added          []*addedToken
	addedByContent map[string]int32
	rawAdded       *addedMatcher // added tokens matched in the raw text
	normAdded      *addedMatcher // added tokens matched in normalized text

	vocab  map[string]int32 // the model's vocabulary
	tokens []string         // id -> token text as written in the file
	kinds  []tokenKind      // id -> what the id is
	// decoded holds every id's bytes back to back: id i decodes to
	// decoded[offsets[i]:offsets[i+1]].
	decoded []byte
	offsets []uint32
}

// tokenKind says what an id is.
type tokenKind uint8

const (
	kindNone    tokenKind = iota // no token has this id
	kindModel                    // a token of the BPE model's vocabulary
	kindAdded                    // a non-special added token
	kindSpecial                  // a special added token
)

// finish builds the decoding tables once the vocabulary is complete.
func (t *Tokenizer) finish() {
	t.offsets = make([]uint32, len(t.tokens)+1)
	for id, tok := range t.tokens {
		if t.kinds[id] != kindNone {
			t.decoded = append(t.decoded, byteLevelDecode(tok)...)
		}
		t.offsets[id+1] = uint32(len(t.decoded))
	}
}

// EncodeOptions adjusts Encode. The zero value encodes as Hugging Face's
// Tokenizer.encode does by default.
type EncodeOptions struct {
	// SpecialAsText makes the text of special added tokens (such as
	// "<|im_start|>") encode as ordinary text instead of as the special token,
	// as the tokenizers library's encode_special_tokens setting does. Added
	// tokens that are not special are still matched. Use it for untrusted
	// text that must not inject control tokens.
	SpecialAsText bool
}

// Encode returns the token ids of text. Text should be valid UTF-8; an
// invalid byte is kept as that byte (it classifies as punctuation when the
// text is split into words), so Decode returns it as U+FFFD.
func (t *Tokenizer) Encode(text string, opts EncodeOptions) []int32 {
	ids := make([]int32, 0, len(text)/3+1)
	t.rawAdded.split(text, opts.SpecialAsText, func(piece string, id int32) {
		if id >= 0 {
			ids = append(ids, id)
			return
		}
		if t.nfc && !isASCII(piece) { // ASCII text is always in NFC
			piece = norm.NFC.String(piece)
		}
		t.normAdded.split(piece, opts.SpecialAsText, func(piece string, id int32) {
			if id >= 0 {
				ids = append(ids, id)
				return
			}
			ids = t.encodePlain(ids, piece)
		})
	})
	return ids
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// encodePlain appends the ids of s, text without added tokens.
func (t *Tokenizer) encodePlain(ids []int32, s string) []int32 {
	if len(t.steps) == 1 || (len(t.steps) == 2 && t.steps[1].split == nil && !t.steps[1].prefixSpace) {
		// The common pipelines: one split then the byte mapping.
		step := t.steps[0]
		if step.prefixSpace && !strings.HasPrefix(s, " ") {
			s = " " + s
		}
		if step.split == nil {
			return t.model.appendWord(ids, s)
		}
		for i := 0; i < len(s); {
			j := step.split(s, i)
			ids = t.model.appendWord(ids, s[i:j])
			i = j
		}
		return ids
	}
	pieces := []string{s}
	for _, step := range t.steps {
		var next []string
		for _, p := range pieces {
			if step.prefixSpace && !strings.HasPrefix(p, " ") {
				p = " " + p
			}
			if step.split == nil {
				next = append(next, p)
				continue
			}
			next = splitAll(next, p, step.split)
		}
		pieces = next
	}
	for _, p := range pieces {
		ids = t.model.appendWord(ids, p)
	}
	return ids
}

// Decode returns the text of ids. With skipSpecial, special added tokens
// (such as "<|im_end|>") are left out. Byte sequences that are not valid UTF-8
// (a character cut between ids, say) become U+FFFD, one per maximal invalid
// subsequence, as in the tokenizers library. An id that names no token is an
// error.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) (string, error) {
	buf := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		if !t.valid(id) {
			return "", t.idError(id)
		}
		if skipSpecial && t.kinds[id] == kindSpecial {
			continue
		}
		buf = append(buf, t.decoded[t.offsets[id]:t.offsets[id+1]]...)
	}
	if utf8.Valid(buf) {
		return string(buf), nil
	}
	return string(appendLossy(nil, buf)), nil
}

func (t *Tokenizer) valid(id int32) bool {
	return id >= 0 && int(id) < len(t.kinds) && t.kinds[id] != kindNone
}

func (t *Tokenizer) idError(id int32) error {
	return fmt.Errorf("tokenizer: id %d names no token of %s (ids run from 0 to %d)", id, t.name, len(t.kinds)-1)
}

// VocabSize returns one more than the highest token id, the size an
// embedding table needs. Ids below it that name no token are possible in
// principle (Token reports them) but absent from real files.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a token given as written in tokenizer.json (in
// the byte-level spelling: "Ġthe" for " the"), or false. Added tokens take
// precedence, as in the tokenizers library.
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	if id, ok := t.addedByContent[token]; ok {
		return id, true
	}
	id, ok := t.vocab[token]
	return id, ok
}

// Token returns the token with the given id as written in tokenizer.json,
// or false if no token has it.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if !t.valid(id) {
		return "", false
	}
	return t.tokens[id], true
}

// IsSpecial reports whether id is a special added token, one that
// Decode(ids, true) leaves out.
func (t *Tokenizer) IsSpecial(id int32) bool {
	return t.valid(id) && t.kinds[id] == kindSpecial
}

// SpecialTokens returns the ids of the special added tokens, in file order.
func (t *Tokenizer) SpecialTokens() []int32 {
	var ids []int32
	for _, a := range t.added {
		if a.special {
			ids = append(ids, a.id)
		}
	}
	return ids
}
