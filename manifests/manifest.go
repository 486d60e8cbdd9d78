// Package manifests reads specula manifests: TOML files that say which
// checkpoint to run as the target, which (if any) as the draft, with which
// architectures and capabilities, and with which speculation and sampling
// settings (DESIGN.md "Manifests"; docs/manifests.md is the user's guide).
//
// Load (or Parse) decodes a manifest strictly: an unknown key, a key that
// differs from a known one only in case, a value of the wrong type or out of
// range is an *Error naming the file, the line, the key and the fix. It reads
// nothing but the manifest.
//
// Resolve then checks the manifest against the checkpoints and the
// architecture registry, in this order and before any weight is read: the
// checkpoint folders exist and hold a config.json; the architectures resolve
// (unknown is distinct from failed to initialise); every declared capability
// is provided; the draft fits the target; plugin drafts carry a checksum. Its
// result, a Plan, says what would be loaded, exposes only the capabilities
// the manifest declares, and reports the state of the weight files from
// their headers alone.
//
// The package logs through log/slog and never prints.
package manifests

import (
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// SchemaVersion is the only manifest schema this package reads.
const SchemaVersion = 1

// Manifest is a decoded manifest. Load fills every default, so a field's
// zero value never stands for "unset" except where a pointer is nil.
type Manifest struct {
	// Path is the manifest file as given to Load; messages name it.
	Path string
	// Dir is the absolute folder relative checkpoint paths are resolved
	// against: the manifest's own folder.
	Dir string
	// Schema is the schema version, always SchemaVersion.
	Schema int
	// Name names the runnable unit; it defaults to the file name without
	// its .toml extension.
	Name string
	// Target is the [target] table (required).
	Target Target
	// Draft is the [draft] table, or nil when the manifest has none.
	Draft *Draft
	// Speculation is the [speculation] table, with defaults filled in.
	Speculation Speculation
	// Sampling is the [sampling] table: request defaults.
	Sampling Sampling

	// lines maps "table" and "table.key" (top-level keys: "key") to the
	// 1-based line they sit on; absent when unknown.
	lines map[string]int
}

// Checkpoint is what [target] and [draft] have in common: a Hugging Face
// checkpoint folder and how to interpret it.
type Checkpoint struct {
	// Path is the path as written: relative to the manifest's folder,
	// absolute, or starting with "~/".
	Path string
	// Dir is Path resolved: absolute and clean.
	Dir string
	// Architecture is the registry name to build the checkpoint with; ""
	// means config.json's architectures[0].
	Architecture string
	// Capabilities are the capabilities the run may use, as declared; the
	// order is that of model.AllCapabilities.
	Capabilities model.Capabilities
	// Repo is the Hugging Face repository the checkpoint comes from
	// ("Qwen/Qwen3.5-4B"), or "". It is used only to tell a user how to
	// download missing weights.
	Repo string
}

// Target is the [target] table.
type Target struct {
	Checkpoint
	// DType is the compute dtype asked for (default DTypeAuto); the draft
	// computes in the same dtype.
	DType DType
	// AllowSlowDType lets a CPU run use bfloat16 or float16, which MLX's CPU
	// backend computes slowly.
	AllowSlowDType bool
}

// Draft is the [draft] table.
type Draft struct {
	Checkpoint
	// Plugin names the plugin binary that serves the architecture, or ""
	// for a built-in architecture.
	Plugin string
	// SHA256 is the lowercase hex SHA-256 of the plugin binary; required
	// when Plugin is set, and only then.
	SHA256 string
	// Weightless is set by weights = false: the architecture reads no
	// weights (a prompt-lookup drafter), so the checkpoint folder needs only
	// config.json, no weight files are inspected or loaded, and LoadWeights
	// receives no tensors.
	Weightless bool
}

// Speculation is the [speculation] table.
type Speculation struct {
	// Enabled turns drafting on (default true). When false the draft is
	// still loaded and kept level, but never proposes.
	Enabled bool
	// MaxDepth caps the adaptive depth controller (0..64; 0, the default,
	// means no cap beyond the draft's block size). It also caps a selector
	// draft's fixed depth.
	MaxDepth int
	// SelectorDepth is the fixed number of tokens a selector draft
	// (DFlash2) proposes per round (1..64, default 7; spec/speculation.md
	// section 8.1).
	SelectorDepth int
	// ConfidenceFloor (confidence_floor, 0 <= x < 1; nil: unset) lets a
	// round verify only the leading drafts whose estimated chance of all
	// being accepted — the product of the draft's own probabilities of
	// them — is at least this; 0 verifies every draft. Unset means
	// DefaultConfidenceFloor on the CPU, where each verified row costs
	// nearly as much as a decode step, and 0 on a GPU, where rows are
	// nearly free and the cut's wait on the draft is not.
	ConfidenceFloor *float64
}

// Speculation defaults and limits.
const (
	// DefaultSelectorDepth is DFlash2's fixed depth (dflash2Depth).
	DefaultSelectorDepth = 7
	// MaxDepthLimit bounds max_depth and selector_depth: no released draft
	// has a block larger than 16, so 64 leaves room without admitting typos
	// like 700.
	MaxDepthLimit = 64
	// DefaultConfidenceFloor is confidence_floor's CPU default. On go-tiny's
	// trained DFlash2 (docs/PERFORMANCE.md, 2026-12-04 evening) 0.1 kept
	// 3.04 accepted tokens a round where 0.3 kept 2.90 and verifying every
	// draft 3.05, at the best speed measured (1.50-1.65x against 1.41-1.65x
	// for 0.3 and 1.45x for none): once few-row products ran in register
	// tiles, a verified row cost less than the earlier default of 0.3
	// assumed.
	DefaultConfidenceFloor = 0.1
)

// Sampling is the [sampling] table: defaults for requests that do not set
// their own. A nil pointer means "not set here": the request's value, else
// the sampler's default, applies.
type Sampling struct {
	Temperature      *float64 // >= 0; 0 is greedy
	TopK             *int     // >= 0; 0 disables top-k
	TopP             *float64 // in (0, 1]; 1 disables top-p
	MinP             *float64 // in [0, 1); 0 disables min-p
	RepeatPenalty    *float64 // > 0; 1 disables it
	PresencePenalty  *float64 // finite
	FrequencyPenalty *float64 // finite
	RepeatLastN      *int     // >= -1; -1 is the whole context, 0 disables penalties
	Seed             *int64   // any integer; nil draws a fresh seed per request
	MaxTokens        *int     // > 0
	// StopTokens and StopStrings come from the stop list: token ids (>= 0,
	// below the target's vocabulary) and non-empty strings.
	StopTokens  []int
	StopStrings []string
}

// DType is a compute dtype as a manifest names it.
type DType string

// The dtypes a manifest may name.
const (
	// DTypeAuto is bfloat16 when the run computes on a GPU and float32 on
	// the CPU, whose MLX backend is only fast for float32.
	DTypeAuto     DType = "auto"
	DTypeFloat32  DType = "float32"
	DTypeBFloat16 DType = "bfloat16"
	DTypeFloat16  DType = "float16"
)

// dtypes lists the valid names, in the order messages give them.
var dtypes = []DType{DTypeAuto, DTypeFloat32, DTypeBFloat16, DTypeFloat16}

// For returns the MLX dtype d stands for on a GPU (gpu true) or the CPU.
func (d DType) For(gpu bool) mlx.DType {
	switch d {
	case DTypeFloat32:
		return mlx.Float32
	case DTypeBFloat16:
		return mlx.BFloat16
	case DTypeFloat16:
		return mlx.Float16
	}
	if gpu {
		return mlx.BFloat16
	}
	return mlx.Float32
}

// line returns the line of "table" or "table.key", or 0.
func (m *Manifest) line(key string) int { return m.lines[key] }
