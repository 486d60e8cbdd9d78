// Package registrytest provides fake architectures for tests of the
// registry, manifests and the command line: weightless types that implement
// chosen subsets of the capability interfaces, with sizes read from a
// checkpoint's config.json, and drafts that check their target in
// AttachTarget the way DFlash does. Their forwards are never meant to run and
// return nil arrays.
package registrytest

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

// Config is the part of config.json the fakes read. A non-empty FakeFail
// makes the constructor fail with that message (to test *InitError).
type Config struct {
	HiddenSize int `json:"hidden_size"`
	VocabSize  int `json:"vocab_size"`
	NumLayers  int `json:"num_hidden_layers"`
	BlockSize  int `json:"block_size"`
	DFlash     struct {
		BlockSize      int   `json:"block_size"`
		MaskTokenID    int32 `json:"mask_token_id"`
		TargetLayerIDs []int `json:"target_layer_ids"`
	} `json:"dflash_config"`
	FakeFail string `json:"fake_fail"`
}

// ParseConfig decodes cfg.JSON and checks the sizes every fake needs.
func ParseConfig(cfg registry.Config) (Config, error) {
	var c Config
	if err := json.Unmarshal(cfg.JSON, &c); err != nil {
		return c, fmt.Errorf("config.json: %w", err)
	}
	if c.FakeFail != "" {
		return c, errors.New(c.FakeFail)
	}
	if c.HiddenSize <= 0 || c.VocabSize <= 0 || c.NumLayers <= 0 {
		return c, fmt.Errorf("config.json: hidden_size, vocab_size and num_hidden_layers must be positive (got %d, %d, %d)",
			c.HiddenSize, c.VocabSize, c.NumLayers)
	}
	return c, nil
}

func (c Config) info() model.Info {
	return model.Info{HiddenSize: c.HiddenSize, VocabSize: c.VocabSize, NumLayers: c.NumLayers}
}

// Target is a model.Model and nothing more.
type Target struct{ Sizes model.Info }

// NewTarget builds a Target from config.json.
func NewTarget(cfg registry.Config) (*Target, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Target{Sizes: c.info()}, nil
}

// LoadWeights implements model.Model.
func (t *Target) LoadWeights(map[string]*mlx.Array) error { return nil }

// NewCaches implements model.Model.
func (t *Target) NewCaches() []cache.Cache { return nil }

// Forward implements model.Model.
func (t *Target) Forward(*model.Batch, []cache.Cache) (hidden, aux *mlx.Array) { return nil, nil }

// Unembed implements model.Model.
func (t *Target) Unembed(*mlx.Array) *mlx.Array { return nil }

// Info implements model.Model.
func (t *Target) Info() model.Info { return t.Sizes }

// DraftTarget is a model.DraftTarget that records the taps it was given.
type DraftTarget struct {
	Target
	// Taps holds the layer taps last set.
	Taps []int
}

// NewDraftTarget builds a DraftTarget from config.json.
func NewDraftTarget(cfg registry.Config) (*DraftTarget, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &DraftTarget{Target: Target{Sizes: c.info()}}, nil
}

// TokenEmbeddings implements model.DraftTarget.
func (t *DraftTarget) TokenEmbeddings(*mlx.Array) *mlx.Array { return nil }

// RawLogits implements model.DraftTarget.
func (t *DraftTarget) RawLogits(*mlx.Array) *mlx.Array { return nil }

// NumLayers implements model.DraftTarget.
func (t *DraftTarget) NumLayers() int { return t.Sizes.NumLayers }

// SetLayerTaps implements model.DraftTarget: ids ascending and below
// NumLayers.
func (t *DraftTarget) SetLayerTaps(ids []int) error {
	for i, id := range ids {
		if id < 0 || id >= t.Sizes.NumLayers || (i > 0 && id <= ids[i-1]) {
			return fmt.Errorf("layer taps %v must be strictly ascending and in [0, %d)", ids, t.Sizes.NumLayers)
		}
	}
	t.Taps = append([]int(nil), ids...)
	return nil
}

// Draft is a model.Draft and nothing more (no block, no selector, no
// TargetUser).
type Draft struct{ Sizes model.Info }

// NewDraft builds a Draft from config.json.
func NewDraft(cfg registry.Config) (*Draft, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Draft{Sizes: c.info()}, nil
}

// LoadWeights implements model.Draft.
func (d *Draft) LoadWeights(map[string]*mlx.Array) error { return nil }

// NewCaches implements model.Draft.
func (d *Draft) NewCaches() []cache.Cache { return nil }

// Forward implements model.Draft.
func (d *Draft) Forward(*model.Batch, []cache.Cache, []cache.Cache) (hidden, aux *mlx.Array) {
	return nil, nil
}

// Unembed implements model.Draft.
func (d *Draft) Unembed(*mlx.Array) *mlx.Array { return nil }

// Info returns the draft's sizes (the generic fit check reads it).
func (d *Draft) Info() model.Info { return d.Sizes }

// BlockDraft is a DFlash-like model.BlockDraft and model.TargetUser: it
// reads block_size, mask_token_id and target_layer_ids from config.json and
// checks them against its target in AttachTarget.
type BlockDraft struct {
	Draft
	Block     int
	Mask      int32
	LayerTaps []int
	// Attached is the target given to AttachTarget.
	Attached model.DraftTarget
}

// NewBlockDraft builds a BlockDraft from config.json.
func NewBlockDraft(cfg registry.Config) (*BlockDraft, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	block := c.DFlash.BlockSize
	if block == 0 {
		block = c.BlockSize
	}
	if block < 2 {
		return nil, fmt.Errorf("config.json: block_size %d must be at least 2", block)
	}
	if len(c.DFlash.TargetLayerIDs) == 0 {
		return nil, errors.New("config.json: dflash_config.target_layer_ids is required")
	}
	return &BlockDraft{Draft: Draft{Sizes: c.info()}, Block: block, Mask: c.DFlash.MaskTokenID, LayerTaps: c.DFlash.TargetLayerIDs}, nil
}

// BlockParams implements model.BlockDraft.
func (d *BlockDraft) BlockParams() (blockSize int, maskToken int32) { return d.Block, d.Mask }

// AttachTarget implements model.TargetUser with DFlash's checks: hidden
// size, vocabulary, mask token and tap ids, then sets the target's taps.
func (d *BlockDraft) AttachTarget(t model.DraftTarget) error {
	ti := t.Info()
	switch {
	case d.Sizes.HiddenSize != ti.HiddenSize:
		return fmt.Errorf("hidden_size %d differs from the target's %d", d.Sizes.HiddenSize, ti.HiddenSize)
	case d.Sizes.VocabSize != ti.VocabSize:
		return fmt.Errorf("vocab_size %d differs from the target's %d", d.Sizes.VocabSize, ti.VocabSize)
	case d.Mask < 0 || int(d.Mask) >= ti.VocabSize:
		return fmt.Errorf("mask_token_id %d is outside the target's vocabulary [0, %d)", d.Mask, ti.VocabSize)
	case d.LayerTaps[len(d.LayerTaps)-1] >= t.NumLayers():
		return fmt.Errorf("target_layer_ids %v: tap %d is not below the target's %d layers", d.LayerTaps, d.LayerTaps[len(d.LayerTaps)-1], t.NumLayers())
	}
	if err := t.SetLayerTaps(d.LayerTaps); err != nil {
		return err
	}
	d.Attached = t
	return nil
}

// Selector is a DFlash2-like model.Selector (and model.TargetUser).
type Selector struct{ BlockDraft }

// NewSelector builds a Selector from config.json.
func NewSelector(cfg registry.Config) (*Selector, error) {
	b, err := NewBlockDraft(cfg)
	if err != nil {
		return nil, err
	}
	return &Selector{BlockDraft: *b}, nil
}

// Select implements model.Selector.
func (s *Selector) Select(hidden, logits, anchor *mlx.Array, choose model.ChooseFunc) (tokens, ids, probs *mlx.Array) {
	return nil, nil, nil
}

// The names built-in architectures register under (spec/qwen35.md section 1,
// spec/dflash.md section 1, spec/dflash2.md section 1).
const (
	QwenCausalLM      = "Qwen3_5ForCausalLM"
	QwenConditional   = "Qwen3_5ForConditionalGeneration"
	DFlashDraftModel  = "DFlashDraftModel"
	DFlash2DraftModel = "DFlash2DraftModel"
)

// AddBuiltinFakes registers fakes under the built-in names that are not
// taken yet in r: the Qwen3.5 names as DraftTarget, DFlashDraftModel as
// BlockDraft, DFlash2DraftModel as Selector. Names already registered (by the
// real architectures) are left alone, so a test that uses it gives the same
// verdict on the fixtures whether or not the real architectures are linked
// in.
func AddBuiltinFakes(r *registry.Registry) error {
	var errs []error
	free := func(name string) bool { _, err := r.Lookup(name); return err != nil }
	for _, name := range []string{QwenCausalLM, QwenConditional} {
		if free(name) {
			errs = append(errs, registry.AddTarget(r, name, nil, NewDraftTarget))
		}
	}
	if free(DFlashDraftModel) {
		errs = append(errs, registry.AddDraft(r, DFlashDraftModel, nil, NewBlockDraft))
	}
	if free(DFlash2DraftModel) {
		errs = append(errs, registry.AddDraft(r, DFlash2DraftModel, nil, NewSelector))
	}
	return errors.Join(errs...)
}
