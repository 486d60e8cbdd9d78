package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchText returns about 400 KB of mixed text: this package's Go sources
// (code with indentation), the synthetic training text (prose, Python, JSON,
// ChatML, Chinese, emoji, numbers) and the parity corpus.
func benchText(b *testing.B) string {
	b.Helper()
	var sb strings.Builder
	sources, err := filepath.Glob("*.go")
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range sources {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		sb.Write(data)
	}
	var v tokenizerVectors
	readJSON(b, "testdata/qwen3_vectors.json", &v)
	for sb.Len() < 400_000 {
		sb.WriteString(DefaultTrainingText())
		for _, c := range v.Encode {
			sb.WriteString(c.Text)
		}
	}
	return sb.String()
}

// benchEncode measures encoding throughput in MB/s of input text. With
// cold, every iteration starts from an empty word cache.
func benchEncode(b *testing.B, tok *Tokenizer, cold bool) {
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	tokens := 0
	for range b.N {
		if cold {
			tok.model.cache = wordCache{}
		}
		tokens = len(tok.Encode(text, EncodeOptions{}))
	}
	b.ReportMetric(float64(len(text))/float64(tokens), "bytes/token")
}

func BenchmarkEncodeQwen3(b *testing.B)     { benchEncode(b, qwen3Tokenizer(b), false) }
func BenchmarkEncodeQwen3Cold(b *testing.B) { benchEncode(b, qwen3Tokenizer(b), true) }
func BenchmarkEncodeSmall(b *testing.B)     { benchEncode(b, smallTokenizer(b), false) }

func BenchmarkDecodeQwen3(b *testing.B) {
	tok := qwen3Tokenizer(b)
	text := benchText(b)
	ids := tok.Encode(text, EncodeOptions{})
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		if _, err := tok.Decode(ids, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStreamQwen3(b *testing.B) {
	tok := qwen3Tokenizer(b)
	text := benchText(b)
	ids := tok.Encode(text, EncodeOptions{})
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		s := tok.NewStream()
		for _, id := range ids {
			s.Add(id)
		}
		s.Flush()
	}
}

func BenchmarkLoadQwen3(b *testing.B) {
	qwen3Tokenizer(b)
	data, err := os.ReadFile(qwen3.path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if _, err := Parse(data, qwen3.path); err != nil {
			b.Fatal(err)
		}
	}
}
