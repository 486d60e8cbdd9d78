package main

import "testing"

// Sizes print in decimal units: 4B-shaped bfloat16 weights (8,406,000,000
// bytes) are 8.41 GB, not the 7.83 they were as 2^30-byte units; and no
// size prints as 1000 of a unit.
func TestHumanBytesIsDecimal(t *testing.T) {
	for n, want := range map[int64]string{
		0:              "0 B",
		999:            "999 B",
		1000:           "1.0 kB",
		1536:           "1.5 kB",
		999_949:        "999.9 kB",
		999_950:        "1.0 MB",
		999_999:        "1.0 MB",
		1_000_000:      "1.0 MB",
		999_949_999:    "999.9 MB",
		999_950_000:    "1.00 GB",
		58_000_000:     "58.0 MB",
		1_000_000_000:  "1.00 GB",
		8_406_000_000:  "8.41 GB",
		53_800_000_000: "53.80 GB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
