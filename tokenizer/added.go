package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens: a token matched in
// the text before pre-tokenization, as a whole.
type addedToken struct {
	id         int32
	content    string
	special    bool // skipped by Decode(ids, true); text, not a token, with SpecialAsText
	singleWord bool // matches only when not inside a word
	lstrip     bool // absorbs the whitespace before it
	rstrip     bool // absorbs the whitespace after it
	normalized bool // matched in normalized text rather than the raw text
}

// addedMatcher finds added tokens in text, leftmost first and longest among
// those starting at the same place, as Hugging Face's Aho-Corasick automaton
// (MatchKind::LeftmostLongest) does.
type addedMatcher struct {
	// byFirst lists the tokens by their first byte, longest first.
	byFirst [256][]*addedToken
	any     bool
}

func newAddedMatcher(tokens []*addedToken, pattern func(*addedToken) string) *addedMatcher {
	m := &addedMatcher{}
	for _, t := range tokens {
		p := pattern(t)
		if p == "" {
			continue
		}
		m.byFirst[p[0]] = append(m.byFirst[p[0]], &addedToken{
			id: t.id, content: p, special: t.special, singleWord: t.singleWord,
			lstrip: t.lstrip, rstrip: t.rstrip, normalized: t.normalized,
		})
		m.any = true
	}
	for i := range m.byFirst {
		sort.SliceStable(m.byFirst[i], func(a, b int) bool {
			return len(m.byFirst[i][a].content) > len(m.byFirst[i][b].content)
		})
	}
	return m
}

// next returns the leftmost-longest match in s at or after from.
func (m *addedMatcher) next(s string, from int) (start int, tok *addedToken) {
	for i := from; i < len(s); i++ {
		for _, t := range m.byFirst[s[i]] {
			if strings.HasPrefix(s[i:], t.content) {
				return i, t
			}
		}
	}
	return -1, nil
}

// split cuts s into plain text and added tokens, calling emit for each in
// order: emit(text, -1) for a non-empty stretch of plain text, emit(text, id)
// for a token (text includes any whitespace it strips). It follows Hugging
// Face's AddedVocabulary::find_matches: a single_word token is passed over
// when a word character touches it; lstrip and rstrip widen the match over
// adjacent whitespace (lstrip never into the previous match); with
// specialAsText, special tokens are passed over. A passed-over match is still
// consumed, so scanning resumes after it.
func (m *addedMatcher) split(s string, specialAsText bool, emit func(text string, id int32)) {
	if !m.any {
		if s != "" {
			emit(s, -1)
		}
		return
	}
	done := 0 // s[:done] has been emitted
	for from := 0; from < len(s); {
		start, t := m.next(s, from)
		if t == nil {
			break
		}
		stop := start + len(t.content)
		from = stop
		if specialAsText && t.special {
			continue
		}
		if t.singleWord && (endsWithWord(s[:start]) || startsWithWord(s[stop:])) {
			continue
		}
		if t.lstrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), done)
		}
		if t.rstrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
			from = stop
		}
		if done < start {
			emit(s[done:start], -1)
		}
		emit(s[start:stop], t.id)
		done = stop
	}
	if done < len(s) {
		emit(s[done:], -1)
	}
}

// isWordChar reports whether r is a word character (\w) as Rust's regex crate
// defines it: Alphabetic, M, Nd, Pc or Join_Control.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.In(r, unicode.Nl, unicode.Other_Alphabetic, unicode.M,
		unicode.Nd, unicode.Pc, unicode.Join_Control)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}
