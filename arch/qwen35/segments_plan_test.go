package qwen35

import (
	"reflect"
	"testing"
)

// The cut of a layer pattern into segments, worked out by hand: Qwen3.5's
// three delta-net layers then one attention layer, an attention layer
// first, two attention layers in a row, and no attention at all; taps
// count in the segment that finishes their layer.
func TestPlanSegments(t *testing.T) {
	layers := func(pattern string) *Config {
		cfg := &Config{NumLayers: len(pattern)}
		for _, c := range pattern {
			typ := LinearAttention
			if c == 'A' {
				typ = FullAttention
			}
			cfg.LayerTypes = append(cfg.LayerTypes, typ)
		}
		return cfg
	}
	cases := []struct {
		pattern string
		taps    []int
		want    []segment
	}{
		{"dddAdddA", []int{1, 3, 7}, []segment{
			{finish: -1, whole: []int{0, 1, 2}, next: 3, taps: 1},
			{finish: 3, whole: []int{4, 5, 6}, next: 7, taps: 1},
			{finish: 7, next: -1, taps: 1},
		}},
		{"AdAAd", []int{0, 2, 4}, []segment{
			{finish: -1, next: 0},
			{finish: 0, whole: []int{1}, next: 2, taps: 1},
			{finish: 2, next: 3, taps: 1},
			{finish: 3, whole: []int{4}, next: -1, taps: 1},
		}},
		{"ddd", nil, []segment{{finish: -1, whole: []int{0, 1, 2}, next: -1}}},
	}
	for _, c := range cases {
		if got := planSegments(layers(c.pattern), c.taps); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s with taps %v: %+v, want %+v", c.pattern, c.taps, got, c.want)
		}
	}
}
