package main

import (
	"slices"
	"testing"

	"github.com/specula-dev/specula/plugins/sdk/conformance"
)

func TestLookup(t *testing.T) {
	l := &lookup{maxN: 3, minN: 1}
	cases := []struct {
		name    string
		context []int32
		anchor  int32
		max     int
		want    []int32
	}{
		{"latest occurrence wins", []int32{1, 2, 9, 1, 2, 7, 8}, 2, 4, []int32{7, 8, 2}},
		{"longest suffix first", []int32{5, 1, 2, 3, 6, 2, 3, 4, 1, 2}, 3, 2, []int32{6, 2}},
		{"capped at max", []int32{1, 2, 3, 4, 5, 1}, 2, 2, []int32{3, 4}},
		{"no match declines", []int32{1, 2, 3}, 4, 4, nil},
		{"empty context declines", nil, 4, 4, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := l.Propose(c.context, c.anchor, c.max); !slices.Equal(got, c.want) {
				t.Fatalf("Propose(%v, %d, %d) = %v, want %v", c.context, c.anchor, c.max, got, c.want)
			}
		})
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, Plugin(), conformance.Options{})
}
