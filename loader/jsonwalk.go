package loader

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// maxDepth bounds the nesting of JSON values in a header or an index. The
// only values that may nest are fields we skip (unknown fields of tensor
// entries, unknown index keys); serde_json (the reference crate's parser)
// stops at the same depth, and the bound keeps the decoder's token stack
// small whatever the document holds.
const maxDepth = 128

// walker reads one JSON document (a header or an index) token by token.
type walker struct {
	dec     *json.Decoder
	path    string
	doc     string // what the document is ("header", "index"), for messages
	kind    error  // Kind of a malformed-document error
	dupKind error  // Kind of a duplicate-key error
	fix     string // what would fix a malformed document, for messages
	dup     error  // the first duplicate key found, reported after the walk
}

func newWalker(path, doc string, b []byte, kind, dupKind error, fix string) *walker {
	w := &walker{dec: json.NewDecoder(bytes.NewReader(b)), path: path, doc: doc, kind: kind, dupKind: dupKind, fix: fix}
	w.dec.UseNumber()
	return w
}

// finish checks what follows the top-level value of b, which must be JSON
// whitespace only (writers pad headers with spaces; serde_json accepts any
// whitespace after the value and nothing else), then reports the first
// duplicate key seen, if any.
func (w *walker) finish(b []byte) error {
	if rest := bytes.TrimLeft(b[w.dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return w.fail("", fmt.Sprintf("unexpected bytes after the top-level object at byte %d", len(b)-len(rest)), nil)
	}
	return w.dup
}

// fail returns a malformed-document error, about one tensor if tensor != "".
func (w *walker) fail(tensor, detail string, cause error) error {
	return &Error{File: w.path, Tensor: tensor, Kind: w.kind, Detail: detail + "; " + w.fix, Err: cause}
}

// duplicate records a repeated key if it is the first one seen.
func (w *walker) duplicate(tensor, detail string) {
	if w.dup == nil {
		w.dup = &Error{File: w.path, Tensor: tensor, Kind: w.dupKind,
			Detail: detail + "; a repeated key can hide a second definition, so the file is refused: fix or re-export it"}
	}
}

// token reads the next token, turning decoder failures into rule 6 errors.
func (w *walker) token(tensor string) (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, w.fail(tensor, fmt.Sprintf("invalid JSON near byte %d of the %s", w.dec.InputOffset(), w.doc), err)
	}
	return tok, nil
}

// delim reads the delimiter want; what names the value, for the message.
func (w *walker) delim(want json.Delim, tensor, what string) error {
	tok, err := w.token(tensor)
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return w.fail(tensor, fmt.Sprintf("%s must be %s, found %s", what, describeDelim(want), describe(tok)), nil)
	}
	return nil
}

// key reads an object key. The decoder guarantees keys are strings.
func (w *walker) key(tensor string) (string, error) {
	tok, err := w.token(tensor)
	if err != nil {
		return "", err
	}
	k, ok := tok.(string)
	if !ok {
		return "", w.fail(tensor, fmt.Sprintf("expected an object key, found %s", describe(tok)), nil)
	}
	return k, nil
}

// uints reads an array of non-negative integers that fit uint64; n >= 0
// requires exactly n of them.
func (w *walker) uints(tensor, field string, n int) ([]uint64, error) {
	if err := w.delim('[', tensor, field); err != nil {
		return nil, err
	}
	var out []uint64
	for w.dec.More() {
		tok, err := w.token(tensor)
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, w.fail(tensor, fmt.Sprintf("%s must hold non-negative integers, found %s", field, describe(tok)), nil)
		}
		v, err := parseUint(num)
		if err != nil {
			return nil, w.fail(tensor, fmt.Sprintf("%s: %v", field, err), nil)
		}
		out = append(out, v)
	}
	if err := w.delim(']', tensor, field); err != nil {
		return nil, err
	}
	if n >= 0 && len(out) != n {
		return nil, w.fail(tensor, fmt.Sprintf("%s must hold exactly %d integers, found %d", field, n, len(out)), nil)
	}
	return out, nil
}

// skip reads and discards one value of any kind, refusing nesting deeper
// than maxDepth (the header and the tensor entry are two levels already).
func (w *walker) skip(tensor string) error { return w.skipNested(tensor, 0) }

// skipNested reads tokens until depth levels of objects and arrays, some of
// them opened already, are closed.
func (w *walker) skipNested(tensor string, depth int) error {
	for {
		tok, err := w.token(tensor)
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
				if depth > maxDepth-2 {
					return w.fail(tensor, fmt.Sprintf("JSON nested deeper than %d levels", maxDepth), nil)
				}
			default:
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
	}
}

// parseUint accepts the JSON integers that fit uint64 and nothing else: no
// sign, fraction or exponent (a decoder that converts to float64 would
// accept 1e3 and round 2^64-1).
func parseUint(num json.Number) (uint64, error) {
	s := string(num)
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%s is not a non-negative integer", s)
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s does not fit in 64 bits", s)
	}
	return v, nil
}

// checkSurrogates reports the offset of the first \u escape that encodes
// half of a UTF-16 surrogate pair without the other half. serde_json refuses
// those; encoding/json turns them into U+FFFD, which would make two different
// names in the file decode to the same string. Backslashes occur only inside
// strings in valid JSON, so a byte scan is enough; anything else that is
// malformed is left to the decoder.
func checkSurrogates(b []byte) (offset int, ok bool) {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 >= len(b) {
			break
		}
		if b[i+1] != 'u' {
			i++ // a two-byte escape such as \\ or \"
			continue
		}
		r, ok := hex4(b[i+2:])
		if !ok {
			continue
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if lo, ok := hex4(b[i+8:]); ok && lo >= 0xDC00 && lo < 0xE000 {
					i += 11
					continue
				}
			}
			return i, false
		case r >= 0xDC00 && r < 0xE000:
			return i, false
		}
		i += 5
	}
	return 0, true
}

// hex4 decodes four hexadecimal digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(v), err == nil
}

// describe names a JSON token for an error message.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		default:
			return fmt.Sprintf("%q", string(v))
		}
	case string:
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return fmt.Sprintf("the string %q", v)
	case json.Number:
		return "the number " + string(v)
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}

func describeDelim(d json.Delim) string {
	switch d {
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return fmt.Sprintf("%q", string(d))
}
