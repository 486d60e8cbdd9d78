package tokenizer

import (
	"slices"
	"testing"
	"unicode/utf8"
)

// pretokenizeVectors is the shape of pretokenize_vectors.json, written by
// testdata/make_vectors.py with Python's regex module and checked there
// against the tokenizers library.
type pretokenizeVectors struct {
	Patterns   map[string]string   `json:"patterns"`
	Mismatches int                 `json:"regex_tokenizers_mismatches"`
	Cases      []map[string]any    `json:"cases"`
	Classes    map[string][][2]int `json:"classes"`
}

func TestSplitMatchesPythonRegex(t *testing.T) {
	var v pretokenizeVectors
	readJSON(t, "testdata/pretokenize_vectors.json", &v)
	if v.Mismatches != 0 {
		t.Fatalf("the vectors record %d disagreements between Python's regex and the tokenizers library", v.Mismatches)
	}
	constants := map[string]string{"qwen2": patternQwen2, "qwen35": patternQwen35, "gpt2": patternGPT2}
	for name, pattern := range v.Patterns {
		if constants[name] != pattern {
			t.Errorf("pattern %s: vectors have %q, package has %q", name, pattern, constants[name])
		}
	}
	if len(v.Cases) < 100 {
		t.Fatalf("only %d cases", len(v.Cases))
	}
	for _, c := range v.Cases {
		text := c["text"].(string)
		for name, pattern := range constants {
			var want []string
			for _, p := range c[name].([]any) {
				want = append(want, p.(string))
			}
			got := splitAll(nil, text, splitFuncs[pattern])
			if !slices.Equal(got, want) {
				t.Errorf("%s split of %q = %q, want %q", name, text, got, want)
			}
		}
	}
}

// TestUnicodeClassesMatchReference checks the letter, number, mark and space classes
// for every code point against Oniguruma's, as the tokenizers library uses.
func TestUnicodeClassesMatchReference(t *testing.T) {
	var v pretokenizeVectors
	readJSON(t, "testdata/pretokenize_vectors.json", &v)
	want := map[runeClass][][2]int{
		classLetter: v.Classes["L"],
		classNumber: v.Classes["N"],
		classMark:   v.Classes["M"],
		classSpace:  v.Classes["space"],
	}
	for cls, ranges := range want {
		if len(ranges) == 0 {
			t.Fatalf("no ranges for class %d", cls)
		}
		in := make(map[rune]bool)
		for _, r := range ranges {
			for c := r[0]; c <= r[1]; c++ {
				in[rune(c)] = true
			}
		}
		bad := 0
		for c := rune(0); c <= utf8.MaxRune; c++ {
			if 0xD800 <= c && c < 0xE000 {
				continue
			}
			if got := classify(c) == cls; got != in[c] {
				if bad++; bad <= 10 {
					t.Errorf("class %d: classify(%U) membership = %v, want %v", cls, c, got, in[c])
				}
			}
		}
		if bad > 10 {
			t.Errorf("class %d: %d code points differ in all", cls, bad)
		}
	}
}

// TestSplitInvalidUTF8 checks that bytes that are not UTF-8 (which no Python
// string can hold, so the reference cannot say) are kept, each classed as
// punctuation like U+FFFD.
func TestSplitInvalidUTF8(t *testing.T) {
	tests := []struct {
		name, text string
		qwen, gpt2 []string
	}{
		{"lone byte before a letter", "a\xffb", []string{"a", "\xffb"}, []string{"a", "\xff", "b"}},
		{"bytes after a space", "x \xfe\xff", []string{"x", " \xfe\xff"}, []string{"x", " \xfe\xff"}},
		{"cut character", "\xe4\xb8 y", []string{"\xe4\xb8", " y"}, []string{"\xe4\xb8", " y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for pattern, want := range map[string][]string{patternQwen2: tt.qwen, patternQwen35: tt.qwen, patternGPT2: tt.gpt2} {
				if got := splitAll(nil, tt.text, splitFuncs[pattern]); !slices.Equal(got, want) {
					t.Errorf("split %q with %.20q... = %q, want %q", tt.text, pattern, got, want)
				}
			}
		})
	}
}
