package qwen35

import (
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/nn"
)

// The cut of the fixture's shapes (4 query heads, 2 KV heads, 2 delta-net
// key heads, 4 value heads, intermediate 128), worked out by hand: 2 ranks
// split every head count; 4 ranks outnumber the KV and key heads, so ranks
// 0 and 1 share KV head 0 and key head 0, ranks 2 and 3 head 1.
func TestPlanShard(t *testing.T) {
	cfg := &Config{NumHeads: 4, NumKVHeads: 2, LinearKeyHeads: 2, LinearValueHeads: 4, IntermediateSize: 128}
	cases := []struct {
		rank, ranks                           int
		heads, kv, keys, values, intermediate nn.Span
	}{
		{0, 2, sp(0, 2), sp(0, 1), sp(0, 1), sp(0, 2), sp(0, 64)},
		{1, 2, sp(2, 4), sp(1, 2), sp(1, 2), sp(2, 4), sp(64, 128)},
		{0, 4, sp(0, 1), sp(0, 1), sp(0, 1), sp(0, 1), sp(0, 32)},
		{1, 4, sp(1, 2), sp(0, 1), sp(0, 1), sp(1, 2), sp(32, 64)},
		{2, 4, sp(2, 3), sp(1, 2), sp(1, 2), sp(2, 3), sp(64, 96)},
		{3, 4, sp(3, 4), sp(1, 2), sp(1, 2), sp(3, 4), sp(96, 128)},
	}
	for _, c := range cases {
		s, local, err := planShard(cfg, c.rank, c.ranks)
		if err != nil {
			t.Fatalf("rank %d of %d: %v", c.rank, c.ranks, err)
		}
		if s.heads != c.heads || s.kvHeads != c.kv || s.keyHeads != c.keys || s.valueHeads != c.values || s.inter != c.intermediate {
			t.Errorf("rank %d of %d: heads %v kv %v keys %v values %v intermediate %v", c.rank, c.ranks, s.heads, s.kvHeads, s.keyHeads, s.valueHeads, s.inter)
		}
		if local.NumHeads != c.heads.Len() || local.NumKVHeads != c.kv.Len() || local.LinearKeyHeads != c.keys.Len() ||
			local.LinearValueHeads != c.values.Len() || local.IntermediateSize != c.intermediate.Len() || cfg.NumHeads != 4 {
			t.Errorf("rank %d of %d: local config %+v (and the whole one must stay as it was)", c.rank, c.ranks, local)
		}
	}
}

// A rank count that does not fit a head count is refused, naming the
// config.json field, its value and the rank count.
func TestPlanShardRefuses(t *testing.T) {
	base := Config{NumHeads: 8, NumKVHeads: 2, LinearKeyHeads: 4, LinearValueHeads: 8, IntermediateSize: 96}
	cases := []struct {
		name  string
		edit  func(*Config)
		ranks int
		want  string
	}{
		{"query heads", func(*Config) {}, 3, "num_attention_heads = 8 is not divisible by 3 ranks"},
		{"KV heads", func(c *Config) { c.NumHeads, c.NumKVHeads = 12, 3 }, 4, "num_key_value_heads = 3: 4 ranks neither divide it nor are a multiple of it"},
		{"value heads", func(c *Config) { c.LinearValueHeads = 12 }, 8, "linear_num_value_heads = 12 is not divisible by 8 ranks"},
		{"key heads", func(c *Config) { c.LinearKeyHeads, c.LinearValueHeads = 3, 12 }, 4, "linear_num_key_heads = 3: 4 ranks neither divide it"},
		{"intermediate", func(c *Config) { c.IntermediateSize = 90 }, 4, "intermediate_size = 90 is not divisible by 4 ranks"},
	}
	for _, c := range cases {
		cfg := base
		c.edit(&cfg)
		_, _, err := planShard(&cfg, 0, c.ranks)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func sp(start, stop int) nn.Span { return nn.Span{Start: start, Stop: stop} }
