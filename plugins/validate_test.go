package plugins

import (
	"math"
	"strings"
	"testing"

	"github.com/specula-dev/specula/plugins/internal/wire"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
)

func TestValidateProposal(t *testing.T) {
	const vocab = 8
	sparse := func(tokens, ids []int32, width int, probs ...float32) *draftv1.ProposeResponse {
		return &draftv1.ProposeResponse{Tokens: tokens, Dist: &draftv1.Distribution{Rows: uint32(len(tokens)), Width: uint32(width), Ids: ids, Probs: wire.Float32Bytes(probs)}}
	}
	dense := func(tokens []int32, probs ...float32) *draftv1.ProposeResponse {
		return &draftv1.ProposeResponse{Tokens: tokens, Dist: &draftv1.Distribution{Rows: uint32(len(tokens)), Width: vocab, Dense: true, Probs: wire.Float32Bytes(probs)}}
	}
	row := func(hot int, p float32) []float32 {
		r := make([]float32, vocab)
		r[hot] = p
		r[(hot+1)%vocab] = 1 - p
		return r
	}
	nan := float32(math.NaN())
	cases := []struct {
		name string
		resp *draftv1.ProposeResponse
		max  int
		want string // "" = valid
	}{
		{"sparse one-hot", sparse([]int32{3, 4}, []int32{3, 4}, 1, 1, 1), 4, ""},
		{"sparse two", sparse([]int32{3}, []int32{3, 5}, 2, 0.25, 0.75), 4, ""},
		{"dense", dense([]int32{2}, row(2, 0.9)...), 4, ""},
		{"row sum within tolerance", sparse([]int32{3}, []int32{3}, 1, 1.0005), 4, ""},
		{"too many tokens", sparse([]int32{3, 4}, []int32{3, 4}, 1, 1, 1), 1, "at most 1"},
		{"no distribution", &draftv1.ProposeResponse{Tokens: []int32{1}}, 4, "without a distribution"},
		{"rows differ", &draftv1.ProposeResponse{Tokens: []int32{1}, Dist: &draftv1.Distribution{Rows: 2, Width: 1, Ids: []int32{1, 1}, Probs: wire.Float32Bytes([]float32{1, 1})}}, 4, "2 rows for 1 tokens"},
		{"dense of wrong width", &draftv1.ProposeResponse{Tokens: []int32{1}, Dist: &draftv1.Distribution{Rows: 1, Width: 3, Dense: true, Probs: wire.Float32Bytes([]float32{0, 1, 0})}}, 4, "want the vocabulary size 8"},
		{"sparse too wide", sparse([]int32{1}, make([]int32, 9), 9, make([]float32, 9)...), 4, "want 1 … 8"},
		{"ids missing", sparse([]int32{1}, []int32{1}, 2, 0.5, 0.5), 4, "1 ids, want 1 rows × 2"},
		{"token outside", sparse([]int32{8}, []int32{8}, 1, 1), 4, "outside the vocabulary"},
		{"id outside", sparse([]int32{1}, []int32{1, -1}, 2, 0.5, 0.5), 4, "id -1"},
		{"probs short", sparse([]int32{1}, []int32{1}, 1), 4, "0 probability bytes"},
		{"NaN", sparse([]int32{1}, []int32{1}, 1, nan), 4, "probability NaN"},
		{"negative", sparse([]int32{1}, []int32{1, 2}, 2, -0.5, 1.5), 4, "probability -0.5"},
		{"infinite", sparse([]int32{1}, []int32{1}, 1, float32(math.Inf(1))), 4, "probability +Inf"},
		{"row sum off", sparse([]int32{1}, []int32{1, 2}, 2, 0.5, 0.4), 4, "sums to 0.9"},
		{"drafted token has q 0", sparse([]int32{1}, []int32{1, 2}, 2, 0, 1), 4, "probability 0 in its own row"},
		{"dense token has q 0", dense([]int32{2}, row(3, 1)...), 4, "probability 0 in its own row"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateProposal(c.resp, c.max, vocab)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("err = %v, want one saying %q", err, c.want)
			}
		})
	}
}
