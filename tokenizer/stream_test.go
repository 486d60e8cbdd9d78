package tokenizer

import (
	"slices"
	"testing"
)

// byteIDs returns the ids of the single-byte tokens for bs in the synthetic
// tokenizer, where id b is byte b (see BuildSmallBPE).
func byteIDs(bs ...byte) []int32 {
	ids := make([]int32, len(bs))
	for i, b := range bs {
		ids[i] = int32(b)
	}
	return ids
}

// TestStreamHoldsIncompleteCharacters checks when a Stream releases text:
// a character as soon as its last byte arrives, an impossible byte at once.
func TestStreamHoldsIncompleteCharacters(t *testing.T) {
	tok := smallTokenizer(t)
	tests := []struct {
		name  string
		ids   []int32
		adds  []string // what each Add returns
		flush string
	}{
		{"ascii", byteIDs('h', 'i'), []string{"h", "i"}, ""},
		{"cjk byte by byte", byteIDs(0xE4, 0xB8, 0xAD), []string{"", "", "中"}, ""},
		{"emoji byte by byte", byteIDs(0xF0, 0x9F, 0x91, 0x8D, '!'), []string{"", "", "", "👍", "!"}, ""},
		{"cut off at the end", byteIDs('a', 0xE4, 0xB8), []string{"a", "", ""}, "\uFFFD"},
		{"broken then ascii", byteIDs(0xE4, 'x'), []string{"", "\uFFFDx"}, ""},
		{"impossible byte", byteIDs(0xFF, 'y'), []string{"\uFFFD", "y"}, ""},
		{"lone continuation", byteIDs(0x80), []string{"\uFFFD"}, ""},
		{"surrogate encoding", byteIDs(0xED, 0xA0, 0x80), []string{"", "\uFFFD\uFFFD", "\uFFFD"}, ""},
		{"two cut characters", byteIDs(0xC3, 0xE4, 0xB8, 0xAD), []string{"", "\uFFFD", "", "中"}, ""},
		{"special token", []int32{511, 'o', 'k'}, []string{"<|im_end|>", "o", "k"}, ""},
		{"unknown id", []int32{9999, 'o'}, []string{"", "o"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tok.NewStream()
			var got []string
			for _, id := range tt.ids {
				got = append(got, s.Add(id))
			}
			if !slices.Equal(got, tt.adds) {
				t.Errorf("Add results = %q, want %q", got, tt.adds)
			}
			if f := s.Flush(); f != tt.flush {
				t.Errorf("Flush() = %q, want %q", f, tt.flush)
			}
			if f := s.Flush(); f != "" {
				t.Errorf("second Flush() = %q, want empty", f)
			}
		})
	}
}

func TestStreamSkipSpecial(t *testing.T) {
	tok := smallTokenizer(t)
	s := tok.NewStream()
	s.SkipSpecial = true
	var out string
	for _, id := range []int32{510, 'h', 'i', 511, 509} {
		out += s.Add(id)
	}
	if out != "hi" {
		t.Errorf("stream with SkipSpecial = %q, want %q", out, "hi")
	}
}

func TestDecodeRejectsUnknownIDs(t *testing.T) {
	tok := smallTokenizer(t)
	for _, id := range []int32{-1, smallVocab, 1 << 30} {
		if _, err := tok.Decode([]int32{'a', id}, false); err == nil {
			t.Errorf("Decode accepted id %d", id)
		}
		if _, ok := tok.Token(id); ok {
			t.Errorf("Token(%d) found a token", id)
		}
	}
}
