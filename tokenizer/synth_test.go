package tokenizer

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/small from BuildSmallBPE")

// smallVocab is the vocabulary size of the committed synthetic tokenizer.
const smallVocab = 512

// TestSmallBPEGolden checks that BuildSmallBPE is deterministic: it must
// reproduce testdata/small, whose encodings make_vectors.py checks with the
// Python tokenizers library (small_vectors.json). Run with -update after a
// deliberate change, then rerun make_vectors.py.
func TestSmallBPEGolden(t *testing.T) {
	s, err := BuildSmallBPE("", SmallBPEOptions{VocabSize: smallVocab})
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := s.WriteDir(smallDir); err != nil {
			t.Fatal(err)
		}
	}
	for name, got := range map[string][]byte{
		TokenizerFile:        s.TokenizerJSON,
		TokenizerConfigFile:  s.TokenizerConfigJSON,
		GenerationConfigFile: s.GenerationConfigJSON,
	} {
		want, err := os.ReadFile(filepath.Join(smallDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("BuildSmallBPE's %s differs from %s (run go test -run TestSmallBPEGolden -update if the change is deliberate)", name, smallDir)
		}
	}
}
