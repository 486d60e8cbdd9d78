package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Seeds beyond these live in testdata/fuzz/<FuzzName>/.

// FuzzRoundTrip checks that decoding an encoding gives the text back: exactly
// without a normalizer (with U+FFFD for bytes that are not UTF-8), and NFC-normalized with one (when special tokens are
// text, the whole text is normalized as one piece). A Stream must agree with
// Decode.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "hello world", "don't  stop\n\n", "<|im_start|>user\n你好<|im_end|>", "e\u0301\u0301 👩\u200d💻"} {
		f.Add(s)
	}
	nfc := smallTokenizer(f)
	plain, err := Parse(edit(f, func(m map[string]any) { m["normalizer"] = nil }), "no-normalizer")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			// Invalid bytes are encoded as themselves and decode to U+FFFD.
			got, err := plain.Decode(plain.Encode(s, EncodeOptions{}), false)
			if want := string(appendLossy(nil, []byte(s))); err != nil || got != want {
				t.Fatalf("Decode(Encode(%q)) = %q, %v; want %q", s, got, err, want)
			}
			nfc.Encode(s, EncodeOptions{}) // must not panic
			return
		}
		check := func(tok *Tokenizer, opts EncodeOptions, want string) {
			ids := tok.Encode(s, opts)
			got, err := tok.Decode(ids, false)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("Decode(Encode(%q, %+v)) = %q, want %q", s, opts, got, want)
			}
			stream := tok.NewStream()
			var b strings.Builder
			for _, id := range ids {
				b.WriteString(stream.Add(id))
			}
			b.WriteString(stream.Flush())
			if b.String() != got {
				t.Fatalf("stream of Encode(%q) = %q, Decode = %q", s, b.String(), got)
			}
		}
		check(plain, EncodeOptions{}, s)
		check(plain, EncodeOptions{SpecialAsText: true}, s)
		check(nfc, EncodeOptions{SpecialAsText: true}, norm.NFC.String(s))
	})
}

// FuzzParse checks that no input makes Parse panic, and that whatever it
// accepts can encode and decode.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}, "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}, "added_tokens": [{"id": 3, "content": "<s>", "special": true}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data, "fuzz.json")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.json") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		ids := tok.Encode("ab <s> \u00e9\n", EncodeOptions{})
		if _, err := tok.Decode(ids, true); err != nil {
			t.Fatalf("Decode of Encode's ids: %v", err)
		}
	})
}
