package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The parity tests compare this package with the Python tokenizers library on
// the vectors of testdata/make_vectors.py.

func TestQwen3Parity(t *testing.T) {
	var v tokenizerVectors
	readJSON(t, "testdata/qwen3_vectors.json", &v)
	tok := qwen3Tokenizer(t)
	if got := fileSHA256(t, qwen3.path); got != v.TokenizerSHA256 {
		t.Fatalf("%s has sha256 %s, but the vectors were made from %s (%s); run `make deps` to fetch the pinned file",
			qwen3.path, got, v.TokenizerSHA256, v.Source)
	}
	checkTokenizer(t, tok, &v)
}

func TestSmallParity(t *testing.T) {
	var v tokenizerVectors
	readJSON(t, "testdata/small_vectors.json", &v)
	if got := fileSHA256(t, smallDir+"/"+TokenizerFile); got != v.TokenizerSHA256 {
		t.Fatalf("%s/%s has sha256 %s, but the vectors were made from %s; rerun testdata/make_vectors.py", smallDir, TokenizerFile, got, v.TokenizerSHA256)
	}
	checkTokenizer(t, smallTokenizer(t), &v)
}

func checkTokenizer(t *testing.T, tok *Tokenizer, v *tokenizerVectors) {
	t.Run("VocabSize", func(t *testing.T) {
		if got := tok.VocabSize(); got != v.VocabSize {
			t.Errorf("VocabSize() = %d, want %d", got, v.VocabSize)
		}
	})
	t.Run("TokenID", func(t *testing.T) {
		for token, id := range v.TokenIDs {
			if got, ok := tok.TokenID(token); !ok || got != id {
				t.Errorf("TokenID(%q) = %d, %v; want %d", token, got, ok, id)
			}
			if got, ok := tok.Token(id); !ok || got != token {
				t.Errorf("Token(%d) = %q, %v; want %q", id, got, ok, token)
			}
		}
	})
	t.Run("Encode", func(t *testing.T) { checkEncode(t, tok, v.Encode) })
	t.Run("Decode", func(t *testing.T) { checkDecode(t, tok, v.Decode) })
	t.Run("Stream", func(t *testing.T) {
		var cases []decodeCase
		for _, c := range v.Encode {
			cases = append(cases, decodeCase{IDs: c.IDs, Text: c.Decoded}, decodeCase{IDs: c.IDs, SkipSpecial: true, Text: c.DecodedSkipSpecial})
		}
		checkDecode(t, tok, cases)
	})
}

// TestAddedTokenFlags checks lstrip, rstrip, single_word and normalized added
// tokens (and one with a space, and one that starts like a special token) on
// the synthetic tokenizer with the tokens of small_vectors.json's "flags"
// appended, as make_vectors.py appended them for the Python reference.
func TestAddedTokenFlags(t *testing.T) {
	var v tokenizerVectors
	readJSON(t, "testdata/small_vectors.json", &v)
	if v.Flags == nil {
		t.Fatal("small_vectors.json has no flags section; rerun testdata/make_vectors.py")
	}
	data, err := os.ReadFile(filepath.Join(smallDir, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	added := file["added_tokens"].([]any)
	next := 0
	for _, a := range added {
		next = max(next, int(a.(map[string]any)["id"].(float64))+1)
	}
	for i, raw := range v.Flags.AddedTokens {
		var tok map[string]any
		if err := json.Unmarshal(raw, &tok); err != nil {
			t.Fatal(err)
		}
		tok["id"] = next + i
		added = append(added, tok)
	}
	file["added_tokens"] = added
	data, err = json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data, "small+flags")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Flags.Encode) == 0 {
		t.Fatal("no flag cases")
	}
	checkEncode(t, tok, v.Flags.Encode)
}

// TestLegacyMerges checks that merges written "left right" read the same as
// ["left", "right"]: the synthetic tokenizer, rewritten in the legacy form,
// must still match the Python reference.
func TestLegacyMerges(t *testing.T) {
	var v tokenizerVectors
	readJSON(t, "testdata/small_vectors.json", &v)
	data, err := os.ReadFile(filepath.Join(smallDir, TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	model := file["model"].(map[string]any)
	var legacy []string
	for _, m := range model["merges"].([]any) {
		pair := m.([]any)
		legacy = append(legacy, pair[0].(string)+" "+pair[1].(string))
	}
	model["merges"] = legacy
	data, err = json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"merges":["`) {
		t.Fatal("rewrite did not produce legacy merges")
	}
	tok, err := Parse(data, "small-legacy")
	if err != nil {
		t.Fatal(err)
	}
	checkEncode(t, tok, v.Encode)
}

// TestPipelineVariants checks pipelines that Qwen files do not use (GPT-2's
// ByteLevel regex, prefix spaces, the Qwen3.5 split, ignore_merges) on
// variants of the synthetic tokenizer, edited as make_vectors.py edited them
// for the Python reference.
func TestPipelineVariants(t *testing.T) {
	var v tokenizerVectors
	readJSON(t, "testdata/small_vectors.json", &v)
	if len(v.Variants) == 0 {
		t.Fatal("small_vectors.json has no variants; rerun testdata/make_vectors.py")
	}
	for _, variant := range v.Variants {
		t.Run(variant.Name, func(t *testing.T) {
			data := edit(t, func(f map[string]any) {
				for _, e := range variant.Edits {
					var path []any
					var value any
					if err := json.Unmarshal(e[0], &path); err != nil {
						t.Fatal(err)
					}
					if err := json.Unmarshal(e[1], &value); err != nil {
						t.Fatal(err)
					}
					var node any = f
					for i, key := range path {
						last := i == len(path)-1
						switch k := key.(type) {
						case string:
							if last {
								node.(map[string]any)[k] = value
							} else {
								node = node.(map[string]any)[k]
							}
						case float64:
							if last {
								node.([]any)[int(k)] = value
							} else {
								node = node.([]any)[int(k)]
							}
						}
					}
				}
			})
			tok, err := Parse(data, variant.Name)
			if err != nil {
				t.Fatal(err)
			}
			checkEncode(t, tok, variant.Encode)
		})
	}
}

// TestEncodeConcurrent checks that one Tokenizer serves goroutines at once
// (run with -race): the word cache is the only shared mutable state.
func TestEncodeConcurrent(t *testing.T) {
	var v tokenizerVectors
	readJSON(t, "testdata/small_vectors.json", &v)
	tok := smallTokenizer(t)
	var wg sync.WaitGroup
	errs := make(chan string, 4*len(v.Encode))
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, c := range v.Encode {
				if got := tok.Encode(c.Text, EncodeOptions{}); !slices.Equal(got, c.IDs) {
					errs <- c.Text
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for text := range errs {
		t.Errorf("concurrent Encode(%q) differs from the reference", text)
	}
}
