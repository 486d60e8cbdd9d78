package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// readJSON decodes a testdata file into v.
func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// repoRoot returns the module root (the folder holding go.mod).
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// smallDir is the committed synthetic checkpoint tokenizer (see
// TestSmallBPEGolden).
const smallDir = "testdata/small"

// smallTokenizer loads the committed synthetic tokenizer.
func smallTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := Load(filepath.Join(smallDir, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tokenizerVectors is the shape of qwen3_vectors.json and small_vectors.json,
// written by testdata/make_vectors.py with the Python tokenizers library.
type tokenizerVectors struct {
	Source            string           `json:"source"`
	TokenizerSHA256   string           `json:"tokenizer_sha256"`
	TokenizersVersion string           `json:"tokenizers_version"`
	VocabSize         int              `json:"vocab_size"`
	TokenIDs          map[string]int32 `json:"token_ids"`
	Encode            []encodeCase     `json:"encode"`
	Decode            []decodeCase     `json:"decode"`
	Flags             *struct {
		AddedTokens []json.RawMessage `json:"added_tokens"`
		Encode      []encodeCase      `json:"encode"`
	} `json:"flags"`
	Variants []struct {
		Name string `json:"name"`
		// Edits are [path, value] pairs; a path holds object keys and array
		// indices.
		Edits  [][2]json.RawMessage `json:"edits"`
		Encode []encodeCase         `json:"encode"`
	} `json:"variants"`
}

type encodeCase struct {
	Text               string  `json:"text"`
	IDs                []int32 `json:"ids"`
	Decoded            string  `json:"decoded"`
	DecodedSkipSpecial string  `json:"decoded_skip_special"`
	// IDsSpecialAsText is the encoding with encode_special_tokens set, when
	// it differs from IDs.
	IDsSpecialAsText []int32 `json:"ids_special_as_text"`
}

type decodeCase struct {
	IDs         []int32 `json:"ids"`
	SkipSpecial bool    `json:"skip_special"`
	Text        string  `json:"text"`
}

// qwen3Env names the environment variable that points the parity tests at a
// Qwen3 tokenizer.json; without it they use the file scripts/fetch-tokenizer.sh
// puts under .deps/.
const qwen3Env = "SPECULA_QWEN3_TOKENIZER"

var qwen3 struct {
	once sync.Once
	tok  *Tokenizer
	path string
	err  error
}

// qwen3Tokenizer loads the real Qwen3 tokenizer the parity vectors were made
// with. Its absence fails the test: parity is not optional.
func qwen3Tokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	qwen3.once.Do(func() {
		path := os.Getenv(qwen3Env)
		if path == "" {
			path = filepath.Join(repoRoot(t), ".deps", "tokenizers", "qwen3", TokenizerFile)
		}
		qwen3.path = path
		if _, err := os.Stat(path); err != nil {
			qwen3.err = fmt.Errorf("the Qwen3 tokenizer for the parity tests is missing (%v); run `make deps` (it runs scripts/fetch-tokenizer.sh) or set %s to a tokenizer.json", err, qwen3Env)
			return
		}
		qwen3.tok, qwen3.err = Load(path)
	})
	if qwen3.err != nil {
		t.Fatal(qwen3.err)
	}
	return qwen3.tok
}

// fileSHA256 returns the hex SHA-256 of a file.
func fileSHA256(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// checkEncode compares Encode with the reference encodings and decodings.
func checkEncode(t *testing.T, tok *Tokenizer, cases []encodeCase) {
	t.Helper()
	for _, c := range cases {
		got := tok.Encode(c.Text, EncodeOptions{})
		if !slices.Equal(got, c.IDs) {
			t.Errorf("Encode(%q) = %v, want %v", c.Text, got, c.IDs)
		}
		want := c.IDs
		if c.IDsSpecialAsText != nil {
			want = c.IDsSpecialAsText
		}
		if got := tok.Encode(c.Text, EncodeOptions{SpecialAsText: true}); !slices.Equal(got, want) {
			t.Errorf("Encode(%q, SpecialAsText) = %v, want %v", c.Text, got, want)
		}
		for _, skip := range []bool{false, true} {
			want := c.Decoded
			if skip {
				want = c.DecodedSkipSpecial
			}
			got, err := tok.Decode(c.IDs, skip)
			if err != nil || got != want {
				t.Errorf("Decode(%v, %v) = %q, %v; want %q", c.IDs, skip, got, err, want)
			}
		}
	}
}

// checkDecode compares Decode and a Stream with the reference decodings.
func checkDecode(t *testing.T, tok *Tokenizer, cases []decodeCase) {
	t.Helper()
	for _, c := range cases {
		got, err := tok.Decode(c.IDs, c.SkipSpecial)
		if err != nil || got != c.Text {
			t.Errorf("Decode(%v, %v) = %q, %v; want %q", c.IDs, c.SkipSpecial, got, err, c.Text)
		}
		s := tok.NewStream()
		s.SkipSpecial = c.SkipSpecial
		var b strings.Builder
		for _, id := range c.IDs {
			piece := s.Add(id)
			if !utf8.ValidString(piece) {
				t.Errorf("Stream.Add(%d) in %v returned invalid UTF-8 %q", id, c.IDs, piece)
			}
			b.WriteString(piece)
		}
		b.WriteString(s.Flush())
		if b.String() != c.Text {
			t.Errorf("Stream over %v (skip special %v) = %q, want %q", c.IDs, c.SkipSpecial, b.String(), c.Text)
		}
	}
}
