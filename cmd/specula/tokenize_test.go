package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// smallTokenizerDir is the synthetic checkpoint tokenizer of package
// tokenizer. The expected ids below are the Python tokenizers library's
// encodings of the same texts, from tokenizer/testdata/small_vectors.json.
const smallTokenizerDir = "../../tokenizer/testdata/small"

func runTokenizeCmd(stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	saved := tokenizeStdin
	tokenizeStdin = strings.NewReader(stdin)
	defer func() { tokenizeStdin = saved }()
	code = dispatch(&env{stdout: &out, stderr: &errb}, append([]string{"tokenize"}, args...))
	return code, out.String(), errb.String()
}

func TestTokenize(t *testing.T) {
	file := filepath.Join(smallTokenizerDir, "tokenizer.json")
	chat := "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"encode with folder", "", []string{"--tokenizer", smallTokenizerDir, "Hello world"}, "72 276 108 111 309 397\n"},
		{"encode with file", "", []string{"--tokenizer", file, "Hello world"}, "72 276 108 111 309 397\n"},
		{"flags after text", "", []string{"Hello world", "--tokenizer", file}, "72 276 108 111 309 397\n"},
		{"encode json", "", []string{"--tokenizer", file, "--json", "Hello world"}, `{"ids":[72,276,108,111,309,397]}` + "\n"},
		{"encode nothing", "", []string{"--tokenizer", file, "--json", ""}, `{"ids":[]}` + "\n"},
		{"special tokens", "", []string{"--tokenizer", file, "text<|im_end|>more"}, "116 315 511 109 111 264\n"},
		{"special tokens as text", "", []string{"--tokenizer", file, "--no-special", "text<|im_end|>more"},
			"116 315 60 124 105 109 95 261 100 124 62 109 111 264\n"},
		{"encode stdin", chat, []string{"--tokenizer", file, "-"}, "510 451 262 10 72 105 511 10 510 486 396 320 116 10\n"},
		{"decode args", "", []string{"--tokenizer", file, "--decode", "72", "276", "108", "111", "309", "397"}, "Hello world\n"},
		{"decode commas", "", []string{"--tokenizer", file, "--decode", "[72,276, 108,111 ,309,397]"}, "Hello world\n"},
		{"decode json", "", []string{"--tokenizer", file, "--decode", "--json", "116 315 511 109 111 264"},
			`{"text":"text<|im_end|>more"}` + "\n"},
		{"decode skipping special", "", []string{"--tokenizer", file, "--decode", "--no-special", "--json", "116 315 511 109 111 264"},
			`{"text":"textmore"}` + "\n"},
		{"decode stdin", "510 451 262 10 72 105 511 10 510 486 396 320 116 10\n", []string{"--tokenizer", file, "--decode", "--json", "-"},
			`{"text":"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runTokenizeCmd(tt.stdin, tt.args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if out != tt.want {
				t.Errorf("stdout = %q, want %q", out, tt.want)
			}
			if errOut != "" {
				t.Errorf("stderr = %q, want nothing", errOut)
			}
		})
	}
}

func TestTokenizeErrors(t *testing.T) {
	file := filepath.Join(smallTokenizerDir, "tokenizer.json")
	missing := filepath.Join(t.TempDir(), "nope", "tokenizer.json")
	empty := t.TempDir()
	broken := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(broken, []byte(`{"model": {"type": "WordPiece"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string // substrings of stderr
	}{
		{"no tokenizer flag", []string{"hello"}, exitUsage, []string{"--tokenizer PATH is required", "see 'specula tokenize --help'"}},
		{"no text", []string{"--tokenizer", file}, exitUsage, []string{"want the text"}},
		{"two texts", []string{"--tokenizer", file, "a", "b"}, exitUsage, []string{"one TEXT"}},
		{"unknown flag", []string{"--tokenizer", file, "--bogus", "x"}, exitUsage, []string{"bogus"}},
		{"missing file", []string{"--tokenizer", missing, "x"}, exitFailure, []string{missing, "does not exist"}},
		{"folder without tokenizer.json", []string{"--tokenizer", empty, "x"}, exitFailure, []string{empty, "tokenizer.json"}},
		{"unsupported file", []string{"--tokenizer", broken, "x"}, exitFailure, []string{broken, "model.type", "WordPiece"}},
		{"bad id", []string{"--tokenizer", file, "--decode", "72 x1"}, exitFailure, []string{`"x1" is not a token id`}},
		{"unknown id", []string{"--tokenizer", file, "--decode", "72 99999"}, exitFailure, []string{"99999"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runTokenizeCmd("", tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.code, errOut)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
			if tt.code == exitFailure && strings.Count(errOut, "\n") != 1 {
				t.Errorf("a failure should print one line, got %q", errOut)
			}
		})
	}
}

func TestTokenizeHelp(t *testing.T) {
	code, out, _ := runTokenizeCmd("", "--help")
	if code != exitOK || !strings.Contains(out, "--no-special") {
		t.Errorf("--help: exit %d, output %q", code, out)
	}
}
