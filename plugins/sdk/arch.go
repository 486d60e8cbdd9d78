package sdk

import (
	"context"
	"fmt"
	"reflect"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// Architecture is one architecture a plugin serves. Build it with BlockDraft
// or TokenDraft.
type Architecture struct {
	// Name is the architecture's class name, as config.json's
	// architectures[0] or a manifest's [draft] architecture names it.
	Name string
	// Capabilities is the record Describe declares ("draft", "block-draft",
	// and "selector" when the draft implements model.Selector).
	Capabilities model.Capabilities
	// NeedsFeatures says the host must send the target's feature rows with
	// every Committed.
	NeedsFeatures bool

	// load builds the draft; block drafts do it on the MLX worker, token
	// drafts (which need no MLX) on the caller's goroutine.
	load func(ctx context.Context, cfg *LoadConfig) (loaded, error)
}

// LoadConfig is what a constructor receives at Load: the draft's checkpoint
// and what the host says about its target.
type LoadConfig struct {
	// Architecture is the name the host asked for.
	Architecture string
	// CheckpointDir is the draft's checkpoint folder (absolute).
	CheckpointDir string
	// ConfigJSON is its config.json.
	ConfigJSON []byte
	// DType is the compute dtype the manifest asked for.
	DType mlx.DType
	// Device is "gpu" or "cpu": where the host computes.
	Device string
	// Target describes the host's target model.
	Target TargetInfo
	// CheckOnly says the host only checks that the draft fits its target
	// (`specula check`, manifest resolution): the SDK builds the draft,
	// attaches the target and binds the checkpoint's tensors lazily, reads
	// no weight data, and keeps nothing loaded. Target.Tensors is empty.
	// Constructors may skip work that only serving needs.
	CheckOnly bool
}

// TargetInfo describes the host's target model.
type TargetInfo struct {
	// Architecture is the target's architecture name, when the host knows it.
	Architecture string
	// HiddenSize, VocabSize and NumLayers are the target's sizes.
	HiddenSize, VocabSize, NumLayers int
	// Tensors locate the target's token embedding and head in its
	// safetensors files, when the host knows them.
	Tensors []TensorLocation
}

// TensorLocation says where one target tensor lives: Size bytes at the
// absolute Offset of File, of safetensors dtype DType and shape Shape.
type TensorLocation struct {
	Name, Role, File string
	Offset, Size     int64
	DType            string
	Shape            []int
}

// Target tensor roles. A quantized embedding or head (an MLX-format
// target) also sends its scales, and for affine quantization its biases,
// under the role plus ScalesSuffix or BiasesSuffix ("embedding.scales").
const (
	RoleEmbedding = "embedding"
	RoleHead      = "head"
	ScalesSuffix  = ".scales"
	BiasesSuffix  = ".biases"
)

// BlockDraft serves a block draft (DFlash-style) out of process. newDraft
// builds a weightless instance from the checkpoint's config on the plugin's
// MLX worker (mlx.Do); the SDK then attaches the target (if the draft is a
// model.TargetUser, through a stand-in that reads the target's embedding and
// head from the files the host names), loads the checkpoint's weights, and
// serves sessions with the speculation package's BlockDrafter, exactly as a
// built-in draft is served in process. The capability record is computed
// from T by type assertion, as the registry does for built-ins.
func BlockDraft[T model.BlockDraft](name string, newDraft func(cfg *LoadConfig) (T, error)) Architecture {
	return Architecture{
		Name:          name,
		Capabilities:  capabilitiesOf(reflect.TypeFor[T]()),
		NeedsFeatures: true,
		load: func(ctx context.Context, cfg *LoadConfig) (l loaded, err error) {
			err = safeDo(ctx, func() error {
				d, err := newDraft(cfg)
				if err != nil {
					return err
				}
				l, err = loadBlock(cfg, d)
				return err
			})
			return l, err
		},
	}
}

// Proposer is a token-level draft that needs neither features nor an MLX
// model (prompt lookup, n-gram tables, ...).
type Proposer interface {
	// Propose returns at most max tokens to follow anchor, given the
	// committed context (the tokens at slots 0 … len(context)−1; anchor is
	// the token after them, not yet in the context). Nil or empty declines.
	// Proposals are deterministic: each token is sent with probability 1.
	// Every id must lie in the target's vocabulary (LoadConfig.Target's
	// VocabSize): the SDK cuts a proposal before the first id outside it and
	// drops tokens past max, logging a warning the first time.
	Propose(context []int32, anchor int32, max int) []int32
}

// TokenDraft serves a token-level proposer. It declares "draft" and
// "block-draft" (its sessions propose up to maxDepth tokens per round, as a
// block draft's do) and needs no features.
func TokenDraft(name string, maxDepth int, newProposer func(cfg *LoadConfig) (Proposer, error)) Architecture {
	return Architecture{
		Name:         name,
		Capabilities: model.Capabilities{model.CapDraft, model.CapBlockDraft},
		load: func(_ context.Context, cfg *LoadConfig) (loaded, error) {
			if maxDepth < 1 {
				return nil, fmt.Errorf("architecture %s: maxDepth %d, want at least 1", name, maxDepth)
			}
			p, err := newProposer(cfg)
			if err != nil {
				return nil, err
			}
			return &tokenLoaded{name: name, p: p, maxDepth: maxDepth, vocab: cfg.Target.VocabSize}, nil
		},
	}
}

// capabilitiesOf asserts t against the draft capability interfaces.
func capabilitiesOf(t reflect.Type) model.Capabilities {
	var out model.Capabilities
	for _, c := range []struct {
		cap model.Capability
		typ reflect.Type
	}{
		{model.CapDraft, reflect.TypeFor[model.Draft]()},
		{model.CapBlockDraft, reflect.TypeFor[model.BlockDraft]()},
		{model.CapSelector, reflect.TypeFor[model.Selector]()},
	} {
		if t.Implements(c.typ) {
			out = append(out, c.cap)
		}
	}
	return out
}
