package tokenizer

import "unicode/utf8"

// Stream decodes ids one at a time, as a generator produces them. Add returns
// only complete characters: the bytes of a character split across tokens are
// held until the token that completes it arrives. Joining what Add returns
// and what Flush returns gives the text Decode would give for the same ids.
//
// A Stream is not safe for concurrent use.
type Stream struct {
	t *Tokenizer
	// SkipSpecial leaves special added tokens out of the text, like
	// Decode(ids, true). Set it before the first Add.
	SkipSpecial bool
	pending     []byte // bytes not yet returned: the start of an incomplete character
}

// NewStream returns a Stream that decodes ids of t, special tokens included.
func (t *Tokenizer) NewStream() *Stream {
	return &Stream{t: t}
}

// Add decodes one more id and returns the text it completes, possibly empty.
// An id that names no token is ignored (Decode reports it; a stream cannot).
// Bytes that cannot become a valid character, whatever follows, come out as
// U+FFFD right away.
func (s *Stream) Add(id int32) string {
	t := s.t
	if !t.valid(id) || (s.SkipSpecial && t.kinds[id] == kindSpecial) {
		return ""
	}
	tok := t.decoded[t.offsets[id]:t.offsets[id+1]]
	if len(s.pending) == 0 && utf8.Valid(tok) {
		return string(tok)
	}
	s.pending = append(s.pending, tok...)
	var out []byte
	b := s.pending
	i := 0
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			out = append(out, b[i])
			i++
			continue
		}
		if r, n := utf8.DecodeRune(b[i:]); r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		n, open := subpart(b[i:])
		if open {
			break // the character may still be completed by the next token
		}
		out = utf8.AppendRune(out, utf8.RuneError)
		i += n
	}
	s.pending = append(s.pending[:0], b[i:]...)
	return string(out)
}

// Flush returns the bytes still held, with U+FFFD for the incomplete
// character they start, and resets the stream.
func (s *Stream) Flush() string {
	if len(s.pending) == 0 {
		return ""
	}
	out := string(appendLossy(nil, s.pending))
	s.pending = s.pending[:0]
	return out
}
