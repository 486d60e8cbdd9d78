package tokenizer

import "unicode/utf8"

// The split patterns below are the regular expressions that byte-level BPE
// tokenizers use to cut text into words before BPE. Go's regexp has no
// lookahead, which two of their alternatives need, so each pattern is
// implemented as a hand-written scanner that returns, for a start position,
// the end of the match the regex engine would report there (leftmost-first
// alternation, greedy quantifiers, backtracking). Every position starts a
// match for these patterns (each character is a letter, number, space or
// "other"), so splitting is: match at 0, then at the match's end, and so on.
// TestSplitMatchesPythonRegex checks the scanners against Python's regex
// module (and the vectors script checks that module against Hugging Face
// tokenizers) on a corpus of tricky strings.

// Split patterns, as they appear in tokenizer.json files.
const (
	// patternQwen2 is the Split regex of Qwen2, Qwen2.5 and Qwen3.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternQwen35 is the Split regex of Qwen3.5: Qwen2's with combining
	// marks (\p{M}) joining letters in words and leaving the "other" class.
	patternQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternGPT2 is the regex of the ByteLevel pre-tokenizer when its
	// use_regex is true (GPT-2's pattern).
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// splitFunc returns the end of the pattern's match that starts at i, where
// 0 <= i < len(s). The result is always > i.
type splitFunc func(s string, i int) int

// splitFuncs maps each supported pattern to its scanner.
var splitFuncs = map[string]splitFunc{
	patternQwen2:  qwenSplitter{marksInWords: false}.end,
	patternQwen35: qwenSplitter{marksInWords: true}.end,
	patternGPT2:   gpt2End,
}

// splitAll appends to dst the pieces that split cuts s into.
func splitAll(dst []string, s string, split splitFunc) []string {
	for i := 0; i < len(s); {
		j := split(s, i)
		dst = append(dst, s[i:j])
		i = j
	}
	return dst
}

// runeAt decodes the character at s[i:]; an invalid byte decodes as
// utf8.RuneError of width 1 (and is classOther).
func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// qwenSplitter scans the Qwen2/Qwen3 pattern (marksInWords false) or the
// Qwen3.5 pattern (marksInWords true). Writing W for the word class (\p{L},
// or [\p{L}\p{M}] in Qwen3.5) and O for "other" ([^\s\p{L}\p{N}], or
// [^\s\p{L}\p{M}\p{N}] in Qwen3.5), the alternatives, tried in order at
// position i with c the character there, are:
//
//  1. (?i:'s|'t|'re|'ve|'m|'ll|'d): an apostrophe and a contraction suffix,
//     case-insensitively (simple case folding also maps U+017F LATIN SMALL
//     LETTER LONG S to s).
//  2. [^\r\n\p{L}\p{N}]?W+: if c is in W, the optional prefix cannot take it
//     (in Qwen2 it excludes letters; in Qwen3.5 it may take a mark, but then
//     W+ continues the same run), so the match is the W run from i. Otherwise,
//     if c is neither \r, \n nor a number and the next character is in W, the
//     match is c plus the W run after it. Backtracking adds nothing: with the
//     prefix empty, W+ needs c in W.
//  3. \p{N}: a single number character.
//  4. " ?O+[\r\n]*": if c is in O, the O run from i; if c is an ASCII space
//     followed by O, the space plus that run; either way followed by every \r
//     and \n after it. (A space followed by a non-O character cannot match:
//     without the optional space, O+ would need the space to be in O.)
//  5. \s*[\r\n]+: c is whitespace now (every other class matched above). Let
//     the maximal whitespace run be s[i:j]. Greedy \s* takes all of it and
//     backtracks until [\r\n]+ can match, which first happens at the last \r
//     or \n of the run; [\r\n]+ then ends right after it (the next character
//     is not \r or \n, else it would have been the last). So if the run holds a
//     line break, the match ends after the last one.
//  6. \s+(?!\S): \s+ takes the run; the lookahead holds at j only if j is the
//     end of the text. Otherwise the first backtrack, to the last character of
//     the run, succeeds (the character after is whitespace) provided the run
//     has at least two characters. So: the whole run at the end of the text,
//     else the run minus its last character.
//  7. \s+: the one-character run that 6 could not shorten.
type qwenSplitter struct {
	marksInWords bool
}

func (q qwenSplitter) class(r rune) runeClass {
	c := classify(r)
	if c == classMark && q.marksInWords {
		return classLetter
	}
	return c
}

func (q qwenSplitter) end(s string, i int) int {
	c, n := runeAt(s, i)
	if c == '\'' {
		if k := contraction(s, i+1, true); k > 0 {
			return i + 1 + k
		}
	}
	cls := q.class(c)
	if cls == classLetter {
		return q.wordRun(s, i+n)
	}
	if c != '\r' && c != '\n' && cls != classNumber && i+n < len(s) {
		if c2, n2 := runeAt(s, i+n); q.class(c2) == classLetter {
			return q.wordRun(s, i+n+n2)
		}
	}
	switch cls {
	case classNumber:
		return i + n
	case classOther, classMark: // a mark is in W (Qwen3.5) or in O (Qwen2)
		return lineBreaks(s, q.otherRun(s, i+n))
	}
	if c == ' ' && i+1 < len(s) {
		if c2, n2 := runeAt(s, i+1); q.isOther(c2) {
			return lineBreaks(s, q.otherRun(s, i+1+n2))
		}
	}
	return whitespaceEnd(s, i, true)
}

func (q qwenSplitter) isOther(r rune) bool {
	c := q.class(r)
	return c == classOther || c == classMark
}

// wordRun returns the end of the run of W characters starting at i.
func (q qwenSplitter) wordRun(s string, i int) int {
	for i < len(s) {
		c, n := runeAt(s, i)
		if q.class(c) != classLetter {
			break
		}
		i += n
	}
	return i
}

// otherRun returns the end of the run of O characters starting at i.
func (q qwenSplitter) otherRun(s string, i int) int {
	for i < len(s) {
		c, n := runeAt(s, i)
		if !q.isOther(c) {
			break
		}
		i += n
	}
	return i
}

// lineBreaks returns the end of the run of \r and \n starting at i.
func lineBreaks(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// whitespaceEnd returns the end of the match of the whitespace alternatives
// at i, where s[i] starts a whitespace character: `\s*[\r\n]+` (only if
// breaks is true), then `\s+(?!\S)`, then `\s+`. See qwenSplitter for why.
func whitespaceEnd(s string, i int, breaks bool) int {
	j := i
	lastStart := i   // start of the run's last character
	afterBreak := -1 // end of the run's last \r or \n
	chars := 0
	for j < len(s) {
		c, n := runeAt(s, j)
		if classify(c) != classSpace {
			break
		}
		if c == '\r' || c == '\n' {
			afterBreak = j + n
		}
		lastStart = j
		j += n
		chars++
	}
	switch {
	case breaks && afterBreak >= 0:
		return afterBreak
	case j == len(s) || chars == 1:
		return j
	default:
		return lastStart
	}
}

// contraction returns the length in bytes of the contraction suffix ("s",
// "t", "re", "ve", "m", "ll" or "d") at s[i:], or 0 if none. With fold, the
// match is case-insensitive under simple case folding, as (?i:...) is in both
// Oniguruma and Python's regex.
func contraction(s string, i int, fold bool) int {
	if i >= len(s) {
		return 0
	}
	lower := func(b byte) byte {
		if fold && 'A' <= b && b <= 'Z' {
			return b + ('a' - 'A')
		}
		return b
	}
	switch lower(s[i]) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v', 'l':
		second := byte('e')
		if lower(s[i]) == 'l' {
			second = 'l'
		}
		if i+1 < len(s) && lower(s[i+1]) == second {
			return 2
		}
	}
	// U+017F LATIN SMALL LETTER LONG S folds to s.
	if fold && len(s)-i >= 2 && s[i] == 0xC5 && s[i+1] == 0xBF {
		return 2
	}
	return 0
}

// gpt2End scans GPT-2's pattern:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// The contractions are case-sensitive. Each " ?X+" alternative matches the X
// run at i, or an ASCII space followed by an X run. The whitespace
// alternatives behave as alternatives 6 and 7 of qwenSplitter.
func gpt2End(s string, i int) int {
	c, n := runeAt(s, i)
	if c == '\'' {
		if k := contraction(s, i+1, false); k > 0 {
			return i + 1 + k
		}
	}
	cls := gpt2Class(c)
	if cls != classSpace {
		return gpt2Run(s, i+n, cls)
	}
	if c == ' ' && i+1 < len(s) {
		if c2, n2 := runeAt(s, i+1); gpt2Class(c2) != classSpace {
			return gpt2Run(s, i+1+n2, gpt2Class(c2))
		}
	}
	return whitespaceEnd(s, i, false)
}

// gpt2Class folds marks into "other", as GPT-2's pattern does.
func gpt2Class(r rune) runeClass {
	c := classify(r)
	if c == classMark {
		return classOther
	}
	return c
}

func gpt2Run(s string, i int, cls runeClass) int {
	for i < len(s) {
		c, n := runeAt(s, i)
		if gpt2Class(c) != cls {
			break
		}
		i += n
	}
	return i
}
