package manifests

import (
	"strconv"
	"strings"
)

// Error is a problem with a manifest, found while decoding it (Load, Parse)
// or resolving it (Resolve). Its message names the file and, where the
// problem sits on a line, the line; then the table and key, what was found
// and what would fix it:
//
//	manifest qwen.toml:7: unknown key "capabilites" in [target] (did you mean "capabilities"?)
//
// Kind is one of the Err* sentinels, so callers test the situation with
// errors.Is; an underlying cause (a *registry.UnknownError, a
// *registry.InitError, a file system error) is reachable with errors.As.
type Error struct {
	File string // the manifest as given to Load
	Line int    // 1-based; 0 when the problem is not on one line
	Kind error  // one of the Err* sentinels
	Msg  string // what was found and what would fix it
	Err  error  // underlying cause, or nil
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("manifest ")
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the kind and, when present, the underlying cause.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

// kind is the type of the Err* sentinels.
type kind string

func (k kind) Error() string { return string(k) }

// Sentinels for Error.Kind. Decoding (Load, Parse) gives the first group;
// Resolve the second.
var (
	// ErrRead: the manifest file cannot be read.
	ErrRead error = kind("cannot read manifest")
	// ErrSyntax: the file is not valid TOML.
	ErrSyntax error = kind("invalid TOML")
	// ErrSchema: schema is missing or not 1.
	ErrSchema error = kind("unsupported schema")
	// ErrUnknownKey: a key or table the schema does not have, including one
	// that differs from a known key only in case.
	ErrUnknownKey error = kind("unknown key")
	// ErrType: a value of the wrong TOML type.
	ErrType error = kind("wrong type")
	// ErrValue: a value of the right type that is out of range or malformed.
	ErrValue error = kind("invalid value")
	// ErrMissing: a required key or table is absent.
	ErrMissing error = kind("missing key")

	// ErrDType: the compute dtype does not suit the device.
	ErrDType error = kind("unsuitable dtype")
	// ErrWeightsMissing: a checkpoint folder, its config.json or its weight
	// files are absent (or Git LFS pointers): download the checkpoint.
	ErrWeightsMissing error = kind("weights missing")
	// ErrWeightsInvalid: weight files exist but break the safetensors or
	// index rules (including shard paths leaving the checkpoint folder).
	ErrWeightsInvalid error = kind("invalid weights")
	// ErrConfig: config.json is malformed or names no architecture.
	ErrConfig error = kind("invalid config.json")
	// ErrArchitecture: the architecture is unknown, or of the wrong kind.
	ErrArchitecture error = kind("unknown architecture")
	// ErrInit: the architecture is known but its constructor refused the
	// checkpoint's config.
	ErrInit error = kind("architecture failed to initialise")
	// ErrCapability: a declared capability is not provided.
	ErrCapability error = kind("capability not provided")
	// ErrFit: the draft does not fit the target.
	ErrFit error = kind("draft does not fit target")
	// ErrPlugin: a plugin is missing, unavailable or not named.
	ErrPlugin error = kind("plugin problem")
)

// suggest returns the candidate s most likely meant: one equal to it but for
// case, else the nearest within a small edit distance, else "".
func suggest(s string, candidates []string) string {
	for _, c := range candidates {
		if strings.EqualFold(c, s) {
			return c
		}
	}
	best, bestDist := "", 0
	limit := max(1, min(3, len(s)/3))
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if d <= limit && (best == "" || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance between a and b:
// insertions, deletions, substitutions and transpositions of adjacent
// characters each cost 1.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// d[i][j] is the distance between ra[:i] and rb[:j].
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
