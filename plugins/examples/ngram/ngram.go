package main

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/specula-dev/specula/plugins/sdk"
)

// Defaults, overridable in the draft folder's config.json.
const (
	// maxDepth is the most tokens proposed per round: lookups are cheap,
	// and the host's depth controller picks how many it uses.
	maxDepth = 8
	// defaultNgram is the longest suffix looked up: longer matches are
	// more often right, shorter ones more often available.
	defaultNgram = 3
)

// config is config.json: {"max_ngram": 3, "min_ngram": 1}.
type config struct {
	MaxNgram int `json:"max_ngram"`
	MinNgram int `json:"min_ngram"`
}

func newProposer(cfg *sdk.LoadConfig) (sdk.Proposer, error) {
	c := config{MaxNgram: defaultNgram, MinNgram: 1}
	if len(cfg.ConfigJSON) > 0 {
		if err := json.Unmarshal(cfg.ConfigJSON, &c); err != nil {
			return nil, fmt.Errorf("%s/config.json: %v", cfg.CheckpointDir, err)
		}
	}
	if c.MinNgram < 1 || c.MaxNgram < c.MinNgram {
		return nil, fmt.Errorf("%s/config.json: want 1 <= min_ngram <= max_ngram, got %d and %d", cfg.CheckpointDir, c.MinNgram, c.MaxNgram)
	}
	return &lookup{maxN: c.MaxNgram, minN: c.MinNgram}, nil
}

// lookup is the prompt-lookup proposer.
type lookup struct{ maxN, minN int }

// Propose finds the latest earlier occurrence of the last n tokens of
// context+anchor, longest n first, and proposes what followed it.
func (l *lookup) Propose(context []int32, anchor int32, max int) []int32 {
	seq := append(slices.Clip(context), anchor)
	for n := min(l.maxN, len(seq)-1); n >= l.minN; n-- {
		suffix := seq[len(seq)-n:]
		for i := len(seq) - n - 1; i >= 0; i-- {
			if slices.Equal(seq[i:i+n], suffix) {
				end := min(i+n+max, len(seq))
				return slices.Clone(seq[i+n : end])
			}
		}
	}
	return nil
}
