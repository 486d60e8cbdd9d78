// Package dflash2 is the DFlash2 draft (spec/dflash2.md): DFlash's backbone,
// context injection and one-pass block drafting (package dflash), plus
// block-local grouped dynamic causal convolutions around every attention and
// MLP sublayer, and a low-rank candidate selector that picks each draft
// token among the top-K candidates of its position, conditioned on the token
// chosen before it.
//
// The package registers DFlash2DraftModel with the capabilities draft,
// block-draft and selector. A Draft is a *dflash.Draft whose sublayers are
// wrapped by the convolutions; only what is new lives here.
//
// Files: config.go reads the added config fields; conv.go the convolutions;
// selector.go the lattice and the walk (Select); weights.go the added
// tensors and the codebook naming quirk.
package dflash2

import (
	"slices"

	"github.com/specula-dev/specula/arch/dflash"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
)

// ArchName is the architecture name DFlash2 checkpoints give in
// config.json's architectures[0].
const ArchName = "DFlash2DraftModel"

func init() {
	registry.RegisterDraft(ArchName, nil, New)
}

// Draft is a DFlash2 draft: a DFlash draft (embedded: attaching, caches,
// forward, unembedding and block parameters are DFlash's) whose sublayers
// the convolutions wrap, with a candidate selector. Build it with New,
// attach it with AttachTarget, then LoadWeights.
type Draft struct {
	*dflash.Draft
	cfg   *Config
	convs *convStack   // the backbone's dflash.Wrapper
	sel   *selector    // nil until LoadWeights
	own   []*mlx.Array // pinned arrays of the convolutions and the selector
}

var (
	_ model.Selector           = (*Draft)(nil)
	_ model.BidirectionalBlock = (*Draft)(nil)
	_ model.TargetUser         = (*Draft)(nil)
	_ model.WeightHolder       = (*Draft)(nil)
)

// New parses the checkpoint's config.json and returns a weightless draft
// computing in rc.DType.
func New(rc registry.Config) (*Draft, error) {
	cfg, err := ParseConfig(rc.JSON)
	if err != nil {
		return nil, err
	}
	d, err := NewFromConfig(cfg, rc.DType)
	if err != nil {
		return nil, err
	}
	return d, d.ReadQuantization(rc)
}

// NewFromConfig returns a weightless draft for a parsed config.
func NewFromConfig(cfg *Config, dtype mlx.DType) (*Draft, error) {
	convs := &convStack{}
	base, err := dflash.NewFromConfig(&cfg.Config, dtype, convs)
	if err != nil {
		return nil, err
	}
	return &Draft{Draft: base, cfg: cfg, convs: convs}, nil
}

// Config returns the draft's configuration.
func (d *Draft) Config() *Config { return d.cfg }

// Weights returns every array the draft holds: DFlash's, the convolutions'
// and the selector's; empty before LoadWeights.
func (d *Draft) Weights() []*mlx.Array {
	if d.sel == nil {
		return nil
	}
	return append(d.Draft.Weights(), slices.Clone(d.own)...)
}

// Free releases the weights (unpinned; freed at the worker's next sweep).
func (d *Draft) Free() {
	d.Draft.Free()
	mlx.Unpin(d.own...)
	d.own, d.sel, d.convs.layers = nil, nil, nil
}
