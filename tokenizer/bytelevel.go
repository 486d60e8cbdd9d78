package tokenizer

import (
	"unicode/utf8"
)

// Byte-level BPE works on bytes, but its vocabulary is written as text: GPT-2
// maps each byte to one printable character, the byte itself for the 188
// printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') and U+0100 onwards, in byte
// order, for the other 68 (so a space is 'Ġ' U+0120 and a newline 'Ċ' U+010A).

// byteToRune maps a byte to the character that stands for it in vocabularies.
var byteToRune [256]rune

// runeToByte maps those characters back, with -1 for characters that stand
// for no byte. The mapped characters are all below 256+68.
var runeToByte [256 + 68]int16

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF)
		r := rune(b)
		if !printable {
			r = next
			next++
		}
		byteToRune[b] = r
		runeToByte[r] = int16(b)
	}
}

// unmapRune returns the byte that r stands for, if any.
func unmapRune(r rune) (byte, bool) {
	if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
		return 0, false
	}
	return byte(runeToByte[r]), true
}

// byteLevelDecode returns the bytes a token's text stands for: each character
// mapped back through byteToRune's inverse. A token with a character outside
// the mapping (an added token such as "<tool call>" with its space, or one in
// plain UTF-8) stands for its own UTF-8 bytes, as in Hugging Face's ByteLevel
// decoder.
func byteLevelDecode(token string) []byte {
	out := make([]byte, 0, len(token))
	for _, r := range token {
		b, ok := unmapRune(r)
		if !ok {
			return []byte(token)
		}
		out = append(out, b)
	}
	return out
}

// appendLossy appends b to dst as valid UTF-8, replacing each maximal
// ill-formed subsequence with one U+FFFD, as Rust's String::from_utf8_lossy
// does (the Unicode Standard's "substitution of maximal subparts"; Go's
// strings.ToValidUTF8 would replace a whole run of bad bytes with one
// U+FFFD instead).
func appendLossy(dst []byte, b []byte) []byte {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			dst = append(dst, b[i])
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			dst = append(dst, b[i:i+n]...)
			i += n
			continue
		}
		dst = utf8.AppendRune(dst, utf8.RuneError)
		i += maximalSubpart(b[i:])
	}
	return dst
}

// maximalSubpart returns the length of the maximal subpart at the start of
// b, which does not start with a well-formed sequence.
func maximalSubpart(b []byte) int {
	n, _ := subpart(b)
	return n
}

// subpart returns the length of the longest prefix of b that is a prefix of
// some well-formed UTF-8 sequence (at least 1), and whether that prefix ends at
// the end of b (so more bytes could complete it).
func subpart(b []byte) (n int, open bool) {
	lo, hi, need := leadRange(b[0])
	if need == 0 {
		return 1, false
	}
	n = 1
	for k := 0; k < need; k++ {
		if n >= len(b) {
			return n, true
		}
		c := b[n]
		if k > 0 {
			lo, hi = 0x80, 0xBF
		}
		if c < lo || c > hi {
			return n, false
		}
		n++
	}
	return n, false // a complete sequence; callers do not ask for these
}

// leadRange returns, for a lead byte, the allowed range of the byte after it
// and how many continuation bytes follow (Unicode Table 3-7); need is 0 for a
// byte that cannot start a multi-byte sequence.
func leadRange(b byte) (lo, hi byte, need int) {
	switch {
	case 0xC2 <= b && b <= 0xDF:
		return 0x80, 0xBF, 1
	case b == 0xE0:
		return 0xA0, 0xBF, 2
	case 0xE1 <= b && b <= 0xEC, b == 0xEE, b == 0xEF:
		return 0x80, 0xBF, 2
	case b == 0xED:
		return 0x80, 0x9F, 2
	case b == 0xF0:
		return 0x90, 0xBF, 3
	case 0xF1 <= b && b <= 0xF3:
		return 0x80, 0xBF, 3
	case b == 0xF4:
		return 0x80, 0x8F, 3
	}
	return 0, 0, 0
}
