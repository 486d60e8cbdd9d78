package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/specula-dev/specula/tokenizer"
)

func init() {
	register(&command{name: "tokenize", summary: "encode text to token ids, or decode ids to text", run: runTokenize})
}

// tokenizeStdin is where "-" reads from; tests replace it.
var tokenizeStdin io.Reader = os.Stdin

// runTokenize encodes TEXT (or decodes IDS) with a Hugging Face tokenizer.
// Output is the ids separated by spaces, or the text, each followed by a
// newline; --json prints {"ids": [...]} or {"text": "..."} instead.
func runTokenize(e *env, args []string) int {
	fs := newFlags(e, "tokenize", "--tokenizer PATH [--decode] [--json] [--no-special] TEXT|IDS...|-\n\n"+
		"Encodes TEXT to token ids, or with --decode turns IDS (separated by spaces or\n"+
		"commas) into text. \"-\" reads the text or ids from standard input, as is.")
	path := fs.String("tokenizer", "", "a tokenizer.json file, or a checkpoint folder holding one (required)")
	decode := fs.Bool("decode", false, "decode token ids to text")
	asJSON := fs.Bool("json", false, `print {"ids": [...]} or {"text": "..."}`)
	noSpecial := fs.Bool("no-special", false, "when encoding, treat special-token text such as <|im_start|> as plain text;\nwhen decoding, leave special tokens out")
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	usageErr := func(msg string) int {
		fmt.Fprintln(e.stderr, "specula tokenize: "+msg)
		fs.Usage()
		return exitUsage
	}
	switch {
	case *path == "":
		return usageErr("--tokenizer PATH is required")
	case len(pos) == 0:
		return usageErr("want the text to encode (or ids to decode), or - to read standard input")
	case len(pos) > 1 && !*decode:
		return usageErr(fmt.Sprintf("want one TEXT argument, got %d (quote the text)", len(pos)))
	}

	input := strings.Join(pos, " ")
	if len(pos) == 1 && pos[0] == "-" {
		data, err := io.ReadAll(tokenizeStdin)
		if err != nil {
			return fail(e, "tokenize", fmt.Errorf("reading standard input: %w", err))
		}
		input = string(data)
	}
	tok, err := openTokenizer(*path)
	if err != nil {
		return fail(e, "tokenize", err)
	}

	if *decode {
		ids, err := parseIDs(input)
		if err != nil {
			return fail(e, "tokenize", err)
		}
		text, err := tok.Decode(ids, *noSpecial)
		if err != nil {
			return fail(e, "tokenize", err)
		}
		if *asJSON {
			return writeJSON(e, map[string]string{"text": text})
		}
		fmt.Fprintln(e.stdout, text)
		return exitOK
	}

	ids := tok.Encode(input, tokenizer.EncodeOptions{SpecialAsText: *noSpecial})
	if *asJSON {
		return writeJSON(e, map[string][]int32{"ids": ids})
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	fmt.Fprintln(e.stdout, strings.Join(parts, " "))
	return exitOK
}

// openTokenizer loads path, a tokenizer.json file or a folder holding one.
func openTokenizer(path string) (*tokenizer.Tokenizer, error) {
	info, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s does not exist; --tokenizer wants a tokenizer.json file or a checkpoint folder", path)
		}
		return nil, err
	}
	if info.IsDir() {
		file := filepath.Join(path, tokenizer.TokenizerFile)
		if _, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("%s has no %s; --tokenizer wants a tokenizer.json file or a checkpoint folder holding one", path, tokenizer.TokenizerFile)
		}
		path = file
	}
	return tokenizer.Load(path)
}

// parseIDs reads token ids separated by spaces or commas, optionally in
// brackets (so a JSON array works too).
func parseIDs(s string) ([]int32, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
	ids := make([]int32, 0, len(fields))
	for _, f := range fields {
		id, err := strconv.ParseInt(f, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%q is not a token id (want non-negative integers separated by spaces or commas)", f)
		}
		ids = append(ids, int32(id))
	}
	return ids, nil
}

func writeJSON(e *env, v any) int {
	enc := json.NewEncoder(e.stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fail(e, "tokenize", err)
	}
	return exitOK
}
