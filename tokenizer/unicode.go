package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// runeClass is the character class the split patterns distinguish.
type runeClass uint8

const (
	classOther  runeClass = iota // none of the classes below: punctuation, symbols, controls
	classLetter                  // \p{L}
	classNumber                  // \p{N}
	classMark                    // \p{M}
	classSpace                   // \s, which in both Oniguruma and Python's regex is White_Space
)

// asciiClass holds the class of every ASCII character, the common case.
var asciiClass = func() (t [utf8.RuneSelf]runeClass) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = classifySlow(r)
	}
	return t
}()

// classify returns the class of r. A byte that is not valid UTF-8 arrives as
// utf8.RuneError, which is a symbol (So) and so classOther.
func classify(r rune) runeClass {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	return classifySlow(r)
}

func classifySlow(r rune) runeClass {
	switch {
	case 0x4E00 <= r && r <= 0x9FFF, 0xAC00 <= r && r <= 0xD7A3:
		// CJK Unified Ideographs and Hangul Syllables, all letters (Lo):
		// common enough in real text to skip the table searches.
		return classLetter
	case unicode.IsSpace(r):
		return classSpace
	case unicode.IsLetter(r) || unicode.Is(unicode16Letters, r):
		return classLetter
	case unicode.IsNumber(r) || unicode.Is(unicode16Numbers, r):
		return classNumber
	case unicode.IsMark(r) || unicode.Is(unicode16Marks, r):
		return classMark
	}
	return classOther
}

// The reference implementation (Hugging Face tokenizers, whose Split
// pre-tokenizer runs on Oniguruma) classifies characters by Unicode 16.0, while
// Go's unicode package is at Unicode 15.0.0. These tables hold the code points
// that Unicode 16.0 added to the categories L, N and M; the test
// TestUnicodeClassesMatchReference checks classify against Oniguruma's classes
// for every code point. Unicode 16.0 changed no existing code point's category
// among these, so a union with Go's tables is exact (and stays harmless once Go
// moves to Unicode 16).
var (
	unicode16Letters = &unicode.RangeTable{
		R16: []unicode.Range16{
			{Lo: 0x1C89, Hi: 0x1C8A, Stride: 1},
			{Lo: 0xA7CB, Hi: 0xA7CD, Stride: 1},
			{Lo: 0xA7DA, Hi: 0xA7DC, Stride: 1},
		},
		R32: []unicode.Range32{
			{Lo: 0x105C0, Hi: 0x105F3, Stride: 1},
			{Lo: 0x10D4A, Hi: 0x10D65, Stride: 1},
			{Lo: 0x10D6F, Hi: 0x10D85, Stride: 1},
			{Lo: 0x10EC2, Hi: 0x10EC4, Stride: 1},
			{Lo: 0x11380, Hi: 0x11389, Stride: 1},
			{Lo: 0x1138B, Hi: 0x1138B, Stride: 1},
			{Lo: 0x1138E, Hi: 0x1138E, Stride: 1},
			{Lo: 0x11390, Hi: 0x113B5, Stride: 1},
			{Lo: 0x113B7, Hi: 0x113B7, Stride: 1},
			{Lo: 0x113D1, Hi: 0x113D1, Stride: 1},
			{Lo: 0x113D3, Hi: 0x113D3, Stride: 1},
			{Lo: 0x11BC0, Hi: 0x11BE0, Stride: 1},
			{Lo: 0x13460, Hi: 0x143FA, Stride: 1},
			{Lo: 0x16100, Hi: 0x1611D, Stride: 1},
			{Lo: 0x16D40, Hi: 0x16D6C, Stride: 1},
			{Lo: 0x18CFF, Hi: 0x18CFF, Stride: 1},
			{Lo: 0x1E5D0, Hi: 0x1E5ED, Stride: 1},
			{Lo: 0x1E5F0, Hi: 0x1E5F0, Stride: 1},
			{Lo: 0x2EBF0, Hi: 0x2EE5D, Stride: 1},
		},
	}
	unicode16Numbers = &unicode.RangeTable{
		R32: []unicode.Range32{
			{Lo: 0x10D40, Hi: 0x10D49, Stride: 1},
			{Lo: 0x116D0, Hi: 0x116E3, Stride: 1},
			{Lo: 0x11BF0, Hi: 0x11BF9, Stride: 1},
			{Lo: 0x16130, Hi: 0x16139, Stride: 1},
			{Lo: 0x16D70, Hi: 0x16D79, Stride: 1},
			{Lo: 0x1CCF0, Hi: 0x1CCF9, Stride: 1},
			{Lo: 0x1E5F1, Hi: 0x1E5FA, Stride: 1},
		},
	}
	unicode16Marks = &unicode.RangeTable{
		R16: []unicode.Range16{
			{Lo: 0x0897, Hi: 0x0897, Stride: 1},
		},
		R32: []unicode.Range32{
			{Lo: 0x10D69, Hi: 0x10D6D, Stride: 1},
			{Lo: 0x10EFC, Hi: 0x10EFC, Stride: 1},
			{Lo: 0x113B8, Hi: 0x113C0, Stride: 1},
			{Lo: 0x113C2, Hi: 0x113C2, Stride: 1},
			{Lo: 0x113C5, Hi: 0x113C5, Stride: 1},
			{Lo: 0x113C7, Hi: 0x113CA, Stride: 1},
			{Lo: 0x113CC, Hi: 0x113D0, Stride: 1},
			{Lo: 0x113D2, Hi: 0x113D2, Stride: 1},
			{Lo: 0x113E1, Hi: 0x113E2, Stride: 1},
			{Lo: 0x11F5A, Hi: 0x11F5A, Stride: 1},
			{Lo: 0x1611E, Hi: 0x1612F, Stride: 1},
			{Lo: 0x1E5EE, Hi: 0x1E5EF, Stride: 1},
		},
	}
)
