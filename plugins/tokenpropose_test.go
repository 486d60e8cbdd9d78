package plugins_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/plugins/sdk"
	"github.com/specula-dev/specula/plugins/sdk/conformance"
)

// fixedProposer proposes the same tokens whatever it is asked.
type fixedProposer []int32

func (f fixedProposer) Propose([]int32, int32, int) []int32 { return slices.Clone(f) }

// A Proposer that breaks its contract (an id outside the target's
// vocabulary, a negative id, more tokens than asked for) still never
// reaches the host with it, and the author is told once, by a warning
// naming the architecture and the id, instead of drafting silently less.
func TestTokenDraftWarnsAboutBadProposals(t *testing.T) {
	vocab := int64(targetSpec.Vocab)
	for _, c := range []struct {
		name     string
		proposer fixedProposer
		max      uint32
		want     []int32
		warning  string
	}{
		{"outside the vocabulary", fixedProposer{3, int32(vocab) + 5, 4}, 4, []int32{3}, "returned token 21, outside the target's vocabulary [0, 16)"},
		{"negative", fixedProposer{-1, 2}, 4, nil, "returned token -1, outside the target's vocabulary [0, 16)"},
		{"too many", fixedProposer{1, 2, 3, 4, 5, 6}, 2, []int32{1, 2}, "returned 6 tokens, more than the 2 asked for"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &logBuffer{}
			p := sdk.Plugin{Name: "fixed", Version: "0.1.0", Architectures: []sdk.Architecture{
				sdk.TokenDraft("Fixed", 8, func(*sdk.LoadConfig) (sdk.Proposer, error) { return c.proposer, nil }),
			}}
			srv, err := sdk.NewServer(p, slog.New(slog.NewTextHandler(logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			conn := conformance.ServeServer(t, srv)
			ctx := context.Background()
			if _, err := conn.Load(ctx, &draftv1.LoadRequest{Architecture: "Fixed", CheckpointDir: checkpoint(t), ConfigJson: []byte("{}"),
				Target: &draftv1.TargetInfo{HiddenSize: int64(targetSpec.Hidden), VocabSize: vocab, NumLayers: int64(targetSpec.Layers)}}); err != nil {
				t.Fatal(err)
			}
			open, err := conn.Open(ctx, &draftv1.OpenRequest{})
			if err != nil {
				t.Fatal(err)
			}
			id := open.GetSessionId()
			if _, err := conn.Committed(ctx, &draftv1.CommittedRequest{SessionId: id, Tokens: []int32{1, 2, 3}}); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				resp, err := conn.Propose(ctx, &draftv1.ProposeRequest{SessionId: id, Anchor: 4, Max: c.max})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(resp.GetTokens(), c.want) {
					t.Fatalf("proposal %v, want %v", resp.GetTokens(), c.want)
				}
			}
			out := logs.String()
			if n := strings.Count(out, c.warning); n != 1 || !strings.Contains(out, "level=WARN") || !strings.Contains(out, "Fixed") {
				t.Fatalf("%d warnings saying %q for architecture Fixed (want one):\n%s", n, c.warning, out)
			}
		})
	}
}
