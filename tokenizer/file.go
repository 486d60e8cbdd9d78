package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"

	"github.com/specula-dev/specula/internal/jsonerr"
)

// maxTokenID bounds token ids so that a corrupt file cannot make the loader
// allocate tables for billions of ids. Real vocabularies are below 2^18
// (Qwen3.5 has 248,320 ids); 2^24 leaves ample room.
const maxTokenID = 1<<24 - 1

// The JSON shapes of tokenizer.json, as far as this package reads them.
// Fields it does not read (truncation, padding, offsets settings) are ignored,
// as they do not change which ids one text encodes to.
type fileJSON struct {
	Version       string           `json:"version"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         *modelJSON       `json:"model"`
}

type addedTokenJSON struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int64 `json:"vocab"`
	Merges                  mergesJSON       `json:"merges"`
}

// mergesJSON is model.merges, written either as strings "left right" (the
// legacy form) or as pairs ["left", "right"]. Each form decodes in one pass,
// which matters for vocabularies with 150,000 merges.
type mergesJSON struct {
	pairs [][]string
}

// UnmarshalJSON reads either form. A legacy string keeps all its
// space-separated parts, so that parseModel can name a bad merge's index.
func (m *mergesJSON) UnmarshalJSON(data []byte) error {
	// Errors are returned without %w: their offsets count from the start of
	// merges, not of the file, so jsonerr.Explain must not turn them into lines.
	rest := bytes.TrimSpace(data)
	if len(rest) > 0 && rest[0] == '[' {
		rest = bytes.TrimSpace(rest[1:])
	}
	if len(rest) > 0 && rest[0] == '"' {
		var legacy []string
		if err := json.Unmarshal(data, &legacy); err != nil {
			return fmt.Errorf("model.merges: %v", err)
		}
		m.pairs = make([][]string, len(legacy))
		for i, s := range legacy {
			m.pairs[i] = strings.Split(s, " ")
		}
		return nil
	}
	if err := json.Unmarshal(data, &m.pairs); err != nil {
		return fmt.Errorf("model.merges must hold strings \"left right\" or pairs [\"left\", \"right\"]: %v", err)
	}
	return nil
}

// component is the common shape of normalizers, pre-tokenizers, decoders
// and post-processors: a "type" and type-specific fields.
type component struct {
	Type           string            `json:"type"`
	Normalizers    []json.RawMessage `json:"normalizers"`      // Sequence normalizer
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`    // Sequence pre-tokenizer
	Processors     []json.RawMessage `json:"processors"`       // Sequence post-processor
	Decoders       []json.RawMessage `json:"decoders"`         // Sequence decoder
	Pattern        *patternJSON      `json:"pattern"`          // Split
	Behavior       string            `json:"behavior"`         // Split
	Invert         bool              `json:"invert"`           // Split
	AddPrefixSpace bool              `json:"add_prefix_space"` // ByteLevel
	UseRegex       *bool             `json:"use_regex"`        // ByteLevel; absent means true
	Single         []json.RawMessage `json:"single"`           // TemplateProcessing
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// Load reads a Hugging Face tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return Parse(data, path)
}

// Parse builds a Tokenizer from the contents of a tokenizer.json file; name
// (usually the file's path) identifies it in error messages. Errors are
// *FormatError values naming the offending field.
func Parse(data []byte, name string) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, &FormatError{File: name, Msg: "not a valid tokenizer.json", Err: jsonerr.Explain(data, err)}
	}
	if f.Version != "" && f.Version != "1.0" {
		return nil, unsupported(name, "version", "format version %q; only \"1.0\" is known", f.Version)
	}
	t := &Tokenizer{name: name}
	if err := t.parseModel(f.Model); err != nil {
		return nil, err
	}
	if err := t.parseNormalizer(f.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if err := t.parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.parseDecoder(f.Decoder, "decoder"); err != nil {
		return nil, err
	}
	if err := t.parsePostProcessor(f.PostProcessor, "post_processor"); err != nil {
		return nil, err
	}
	if err := t.parseAddedTokens(f.AddedTokens); err != nil {
		return nil, err
	}
	t.finish()
	return t, nil
}

// isNull reports whether a raw JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || string(s) == "null"
}

func (t *Tokenizer) parseComponent(raw json.RawMessage, field string) (*component, error) {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, &FormatError{File: t.name, Field: field, Msg: "must be an object with a \"type\"", Err: err}
	}
	if c.Type == "" {
		return nil, fieldError(t.name, field+".type", "missing")
	}
	return &c, nil
}

func (t *Tokenizer) parseModel(m *modelJSON) error {
	name := t.name
	if m == nil {
		return fieldError(name, "model", "missing: a tokenizer.json needs a model")
	}
	if m.Type != "BPE" {
		if m.Type == "" {
			return fieldError(name, "model.type", "missing; this package reads BPE models (\"type\": \"BPE\")")
		}
		return unsupported(name, "model.type", "model type %q; this package reads byte-level BPE models only (\"BPE\")", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return unsupported(name, "model.dropout", "BPE dropout %v makes encoding random; set it to null for inference", *m.Dropout)
	}
	if len(m.Vocab) == 0 {
		return fieldError(name, "model.vocab", "missing or empty")
	}
	maxID := int64(-1)
	for tok, id := range m.Vocab {
		if id < 0 || id > maxTokenID {
			return fieldError(name, "model.vocab", "token %q has id %d, outside 0..%d", tok, id, maxTokenID)
		}
		maxID = max(maxID, id)
	}
	if err := checkDense(name, "model.vocab", maxID, len(m.Vocab)); err != nil {
		return err
	}
	t.tokens = make([]string, maxID+1)
	t.kinds = make([]tokenKind, maxID+1)
	t.vocab = make(map[string]int32, len(m.Vocab))
	for tok, id := range m.Vocab {
		if t.kinds[id] != kindNone {
			a, b := t.tokens[id], tok
			if b < a {
				a, b = b, a
			}
			return fieldError(name, "model.vocab", "tokens %q and %q share id %d; each id must name one token", a, b, id)
		}
		t.tokens[id] = tok
		t.kinds[id] = kindModel
		t.vocab[tok] = int32(id)
	}

	prefix, suffix := "", ""
	if m.ContinuingSubwordPrefix != nil {
		prefix = *m.ContinuingSubwordPrefix
	}
	if m.EndOfWordSuffix != nil {
		suffix = *m.EndOfWordSuffix
	}
	b := &bpeModel{unkID: -1, fuseUnk: m.FuseUnk}
	if m.UnkToken != nil {
		id, ok := t.vocab[*m.UnkToken]
		if !ok {
			return fieldError(name, "model.unk_token", "%q is not in model.vocab", *m.UnkToken)
		}
		b.unkID = id
	}
	for kind := 0; kind < 4; kind++ {
		for c := 0; c < 256; c++ {
			s := string(byteToRune[c])
			if kind&posFirst == 0 {
				s = prefix + s
			}
			if kind&posLast != 0 {
				s += suffix
			}
			in := &b.initial[kind][c]
			if id, ok := t.vocab[s]; ok {
				in.ids = []int32{id}
				continue
			}
			if m.ByteFallback {
				in.ids = t.byteFallback(s)
			}
			in.unknown = in.ids == nil
		}
	}

	b.merges = make(map[uint64]mergeTarget, len(m.Merges.pairs))
	for i, pair := range m.Merges.pairs {
		field := func() string { return fmt.Sprintf("model.merges[%d]", i) }
		if len(pair) != 2 {
			return fieldError(name, field(), "%q is not a pair of tokens", pair)
		}
		left, ok := t.vocab[pair[0]]
		if !ok {
			return fieldError(name, field(), "token %q is not in model.vocab", pair[0])
		}
		right, ok := t.vocab[pair[1]]
		if !ok {
			return fieldError(name, field(), "token %q is not in model.vocab", pair[1])
		}
		merged := pair[0] + strings.TrimPrefix(pair[1], prefix)
		id, ok := t.vocab[merged]
		if !ok {
			return fieldError(name, field(), "merged token %q is not in model.vocab", merged)
		}
		// As in Hugging Face's HashMap build, a repeated pair keeps its last rank.
		b.merges[pairKey(left, right)] = mergeTarget{rank: int32(i), id: id}
	}
	if m.IgnoreMerges {
		b.whole = make(map[string]int32, len(t.vocab))
		for tok, id := range t.vocab {
			if raw, ok := unmapToken(tok); ok {
				b.whole[raw] = id
			}
		}
	}
	t.model = b
	return nil
}

// nextAddedID returns the id the tokenizers library gives a new added token
// that is not in the model's vocabulary of modelSize tokens, after the added
// tokens with the given ids: the vocabulary size, or one past the highest
// added id once that reaches it.
func nextAddedID(modelSize int, assigned []int32) int64 {
	if len(assigned) == 0 {
		return int64(modelSize)
	}
	highest := int64(slices.Max(assigned))
	if highest >= int64(modelSize) || modelSize == 0 {
		return highest + 1
	}
	return int64(modelSize)
}

// checkDense rejects ids so sparse that the id tables (sized by the highest
// id) would dwarf the file: real vocabularies number their tokens densely.
func checkDense(file, field string, maxID int64, count int) error {
	if maxID >= 2*int64(count)+maxIDGap {
		return fieldError(file, field, "the highest id is %d but there are only %d tokens; ids must be numbered densely from 0", maxID, count)
	}
	return nil
}

// maxIDGap is how many unused ids checkDense tolerates beyond twice the
// number of tokens (checkpoints pad their embedding tables, not their
// tokenizer files, so real files have at most a few unused ids).
const maxIDGap = 1 << 16

// byteFallback returns the <0xXX> tokens for the bytes of s, or nil unless
// the vocabulary has all of them.
func (t *Tokenizer) byteFallback(s string) []int32 {
	ids := make([]int32, 0, len(s))
	for i := 0; i < len(s); i++ {
		id, ok := t.vocab[fmt.Sprintf("<0x%02X>", s[i])]
		if !ok {
			return nil
		}
		ids = append(ids, id)
	}
	return ids
}

// unmapToken returns the bytes a vocabulary token stands for, if every
// character of it is a byte-level character.
func unmapToken(tok string) (string, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := unmapRune(r)
		if !ok {
			return "", false
		}
		out = append(out, b)
	}
	return string(out), true
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage, field string) error {
	if isNull(raw) {
		return nil
	}
	c, err := t.parseComponent(raw, field)
	if err != nil {
		return err
	}
	switch c.Type {
	case "NFC":
		t.nfc = true
		return nil
	case "Sequence":
		for i, sub := range c.Normalizers {
			if err := t.parseNormalizer(sub, fmt.Sprintf("%s.normalizers[%d]", field, i)); err != nil {
				return err
			}
		}
		return nil
	}
	return unsupported(t.name, field+".type", "normalizer %q; supported: NFC, a Sequence of NFC, or null", c.Type)
}

// preStep is one pre-tokenizer of the pipeline: a Split (split set), or the
// ByteLevel pre-tokenizer (byteLevel set), which may add a prefix space and
// split with GPT-2's pattern before its byte mapping.
type preStep struct {
	split       splitFunc
	byteLevel   bool
	prefixSpace bool
}

func (t *Tokenizer) parsePreTokenizer(raw json.RawMessage) error {
	const field = "pre_tokenizer"
	if isNull(raw) {
		return unsupported(t.name, field, "missing; a byte-level BPE tokenizer needs a ByteLevel pre-tokenizer")
	}
	if err := t.appendPreSteps(raw, field); err != nil {
		return err
	}
	// The byte mapping must come last: a Split after it would see the mapped
	// text ('Ġ' for a space), and two mappings would map twice.
	levels := 0
	for i, s := range t.steps {
		if s.byteLevel {
			levels++
			if i != len(t.steps)-1 || levels > 1 {
				return unsupported(t.name, field, "a ByteLevel pre-tokenizer must be the last step, and the only one")
			}
		}
	}
	if levels == 0 {
		return unsupported(t.name, field, "no ByteLevel step; this package reads byte-level BPE tokenizers only")
	}
	return nil
}

func (t *Tokenizer) appendPreSteps(raw json.RawMessage, field string) error {
	c, err := t.parseComponent(raw, field)
	if err != nil {
		return err
	}
	switch c.Type {
	case "Sequence":
		for i, sub := range c.Pretokenizers {
			if err := t.appendPreSteps(sub, fmt.Sprintf("%s.pretokenizers[%d]", field, i)); err != nil {
				return err
			}
		}
		return nil
	case "ByteLevel":
		step := preStep{byteLevel: true, prefixSpace: c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			step.split = splitFuncs[patternGPT2]
		}
		t.steps = append(t.steps, step)
		return nil
	case "Split":
		if c.Pattern == nil || c.Pattern.Regex == nil {
			return unsupported(t.name, field+".pattern", "a Split needs a {\"Regex\": ...} pattern here (string patterns are not supported)")
		}
		split, ok := splitFuncs[*c.Pattern.Regex]
		if !ok {
			return unsupported(t.name, field+".pattern.Regex", "split pattern %q is not one this package implements; known: the Qwen2/Qwen3 pattern, the Qwen3.5 pattern and GPT-2's", *c.Pattern.Regex)
		}
		if c.Behavior != "Isolated" {
			return unsupported(t.name, field+".behavior", "Split behavior %q; only \"Isolated\" is supported", c.Behavior)
		}
		if c.Invert {
			return unsupported(t.name, field+".invert", "an inverted Split is not supported")
		}
		t.steps = append(t.steps, preStep{split: split})
		return nil
	}
	return unsupported(t.name, field+".type", "pre-tokenizer %q; supported: ByteLevel, Split (Qwen or GPT-2 patterns) and Sequences of them", c.Type)
}

func (t *Tokenizer) parseDecoder(raw json.RawMessage, field string) error {
	if isNull(raw) {
		return unsupported(t.name, field, "missing; a byte-level tokenizer needs a ByteLevel decoder")
	}
	c, err := t.parseComponent(raw, field)
	if err != nil {
		return err
	}
	switch c.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		if len(c.Decoders) == 1 {
			return t.parseDecoder(c.Decoders[0], field+".decoders[0]")
		}
	}
	return unsupported(t.name, field+".type", "decoder %q; only ByteLevel is supported", c.Type)
}

func (t *Tokenizer) parsePostProcessor(raw json.RawMessage, field string) error {
	if isNull(raw) {
		return nil
	}
	c, err := t.parseComponent(raw, field)
	if err != nil {
		return err
	}
	switch c.Type {
	case "ByteLevel": // it only adjusts offsets
		return nil
	case "TemplateProcessing":
		// transformers 5 saves every tokenizer that adds no special tokens
		// with the template "$A": it adds nothing. Only the single template
		// matters; one sequence is all that is ever encoded.
		if isSequenceOnly(c.Single) {
			return nil
		}
	case "Sequence":
		for i, sub := range c.Processors {
			if err := t.parsePostProcessor(sub, fmt.Sprintf("%s.processors[%d]", field, i)); err != nil {
				return err
			}
		}
		return nil
	}
	return unsupported(t.name, field+".type", "post-processor %q would add tokens this package does not add; supported: ByteLevel or null", c.Type)
}

// isSequenceOnly reports whether a TemplateProcessing template is the input
// sequence alone ([{"Sequence": {"id": "A", ...}}]), which adds no token.
func isSequenceOnly(template []json.RawMessage) bool {
	if len(template) != 1 {
		return false
	}
	var piece map[string]struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(template[0], &piece); err != nil || len(piece) != 1 {
		return false
	}
	seq, ok := piece["Sequence"]
	return ok && seq.ID == "A"
}

func (t *Tokenizer) parseAddedTokens(list []addedTokenJSON) error {
	t.addedByContent = make(map[string]int32, len(list))
	var maxID int64 = int64(len(t.tokens)) - 1
	for i, a := range list {
		field := fmt.Sprintf("added_tokens[%d]", i)
		if a.ID == nil {
			return fieldError(t.name, field+".id", "missing")
		}
		if *a.ID < 0 || *a.ID > maxTokenID {
			return fieldError(t.name, field+".id", "%d is outside 0..%d", *a.ID, maxTokenID)
		}
		maxID = max(maxID, *a.ID)
	}
	if err := checkDense(t.name, "added_tokens", maxID, len(t.vocab)+len(list)); err != nil {
		return err
	}
	for len(t.tokens) <= int(maxID) {
		t.tokens = append(t.tokens, "")
		t.kinds = append(t.kinds, kindNone)
	}
	var assigned []int32 // ids given to added tokens so far
	for i, a := range list {
		field := fmt.Sprintf("added_tokens[%d]", i)
		id := int32(*a.ID)
		if a.Content == "" {
			continue // Hugging Face ignores empty added tokens
		}
		if prev, dup := t.addedByContent[a.Content]; dup {
			return fieldError(t.name, field+".content", "%q is already added_tokens entry with id %d", a.Content, prev)
		}
		switch t.kinds[id] {
		case kindModel:
			if t.tokens[id] != a.Content {
				return fieldError(t.name, field+".id", "id %d is the model's token %q, not %q", id, t.tokens[id], a.Content)
			}
		case kindAdded, kindSpecial:
			return fieldError(t.name, field+".id", "id %d is also added token %q", id, t.tokens[id])
		}
		if vid, ok := t.vocab[a.Content]; ok && vid != id {
			return fieldError(t.name, field+".id", "%q is the model's token %d, not %d", a.Content, vid, id)
		}
		// The tokenizers library does not take an added token's id from the
		// file: a token outside the model's vocabulary gets the next id after
		// the vocabulary and the added tokens so far (it warns if the file
		// disagrees). A file it did not write itself can disagree, and then
		// only its numbering is right.
		if _, ok := t.vocab[a.Content]; !ok {
			if want := nextAddedID(len(t.vocab), assigned); int64(id) != want {
				return fieldError(t.name, field+".id", "%q has id %d, but the tokenizers library numbers it %d: added tokens that are not in model.vocab take consecutive ids after it, in file order",
					a.Content, id, want)
			}
		}
		assigned = append(assigned, id)
		tok := &addedToken{
			id: id, content: a.Content, special: a.Special, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip,
			// Hugging Face's default: special tokens are matched in the raw
			// text, others in the normalized text.
			normalized: !a.Special,
		}
		if a.Normalized != nil {
			tok.normalized = *a.Normalized
		}
		t.added = append(t.added, tok)
		t.addedByContent[a.Content] = id
		t.tokens[id] = a.Content
		t.kinds[id] = kindAdded
		if a.Special {
			t.kinds[id] = kindSpecial
		}
	}
	var raw, normalized []*addedToken
	for _, a := range t.added {
		if a.normalized {
			normalized = append(normalized, a)
		} else {
			raw = append(raw, a)
		}
	}
	t.rawAdded = newAddedMatcher(raw, func(a *addedToken) string { return a.content })
	t.normAdded = newAddedMatcher(normalized, func(a *addedToken) string {
		if t.nfc {
			return norm.NFC.String(a.content)
		}
		return a.content
	})
	return nil
}
