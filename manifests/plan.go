package manifests

import (
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// Plan is what a resolved manifest would load: the architectures, their
// weightless instances, the capabilities the run may use, the compute dtype,
// the speculation and sampling settings, and the state of the weight files.
// Resolve makes it without reading tensor data.
type Plan struct {
	// Manifest is the manifest file, as given to Load.
	Manifest string
	// Name is the manifest's name.
	Name string
	// GPU says the plan was resolved for a GPU run (Options.GPU).
	GPU bool
	// Target is the target to load.
	Target *TargetPlan
	// Draft is the draft to load, or nil.
	Draft *DraftPlan
	// Speculation says how the speculation core will drive the draft.
	Speculation SpeculationPlan
	// Sampling holds the manifest's request defaults; stop token ids are
	// known to be below the target's vocabulary.
	Sampling Sampling
	// Warnings are things that are allowed but probably not meant, one
	// sentence each.
	Warnings []string

	readyErr error
}

// Component is what the target and draft plans share.
type Component struct {
	// Path is the checkpoint path as the manifest writes it; Dir is it
	// resolved.
	Path, Dir string
	// Requested is the architecture name that was looked up: the
	// manifest's architecture, or config.json's architectures[0] when
	// FromConfig.
	Requested  string
	FromConfig bool
	// Architecture is the registry entry's canonical name (Requested may be
	// an alias).
	Architecture string
	// Source is the entry's source: "built-in" or "plugin <name>".
	Source string
	// Type is the Go type the entry's constructor declares, or "".
	Type string
	// Capabilities are the capabilities the run may use: those the manifest
	// declares, each proven present. Nothing else is exposed.
	Capabilities model.Capabilities
	// Provided is the entry's whole capability record, for information.
	Provided model.Capabilities
	// DType is the compute dtype.
	DType mlx.DType
	// ModelType is config.json's model_type, or "".
	ModelType string
	// Info holds the sizes the instance reports (zero when it reports
	// none).
	Info model.Info
	// Weights is the state of the weight files.
	Weights Weights

	instance any
}

// TargetPlan is the target part of a Plan.
type TargetPlan struct {
	Component
	// Tokenizer is the target folder's tokenizer.json (resolved path), or
	// "" when it has none: prompts must then be token ids.
	Tokenizer string
}

// Model returns the weightless target instance.
func (t *TargetPlan) Model() model.Model { return t.instance.(model.Model) }

// DraftTarget returns the target as a model.DraftTarget when the manifest
// declares "draft-target"; otherwise ok is false, whatever the type
// implements.
func (t *TargetPlan) DraftTarget() (dt model.DraftTarget, ok bool) {
	return capability[model.DraftTarget](&t.Component, model.CapDraftTarget)
}

// DraftPlan is the draft part of a Plan.
type DraftPlan struct {
	Component
	// Plugin and SHA256 name the plugin binary serving the draft; both ""
	// for a built-in.
	Plugin, SHA256 string
	// BlockSize and MaskToken are the draft's BlockParams when it declares
	// "block-draft"; zero otherwise.
	BlockSize int
	MaskToken int32
}

// Instance returns the weightless draft instance: a model.Draft for a
// built-in, the plugin host's proxy for a plugin.
func (d *DraftPlan) Instance() any { return d.instance }

// Draft returns the draft as a model.Draft when it is one (built-ins always
// are).
func (d *DraftPlan) Draft() (model.Draft, bool) {
	return capability[model.Draft](&d.Component, model.CapDraft)
}

// BlockDraft returns the draft as a model.BlockDraft when the manifest
// declares "block-draft"; otherwise ok is false.
func (d *DraftPlan) BlockDraft() (model.BlockDraft, bool) {
	return capability[model.BlockDraft](&d.Component, model.CapBlockDraft)
}

// Selector returns the draft as a model.Selector when the manifest declares
// "selector"; otherwise ok is false, even if the type implements it: the
// speculation core runs a selector session only when declared.
func (d *DraftPlan) Selector() (model.Selector, bool) {
	return capability[model.Selector](&d.Component, model.CapSelector)
}

// capability returns c's instance as T when cap is declared and T is
// implemented.
func capability[T any](c *Component, cap model.Capability) (T, bool) {
	var zero T
	if !c.Capabilities.Contains(cap) {
		return zero, false
	}
	v, ok := c.instance.(T)
	return v, ok
}

// Mode is how the speculation core drives the draft.
type Mode string

// Modes.
const (
	// ModeOff: plain decoding (no draft, drafting disabled, or a draft the
	// core cannot drive).
	ModeOff Mode = "off"
	// ModeBlock: block drafting with the adaptive depth controller.
	ModeBlock Mode = "block"
	// ModeSelector: selector drafting at a fixed depth.
	ModeSelector Mode = "selector"
)

// SpeculationPlan is the speculation part of a Plan.
type SpeculationPlan struct {
	Mode Mode
	// MaxDepth caps the adaptive controller (0: no cap).
	MaxDepth int
	// FixedDepth is the selector mode's depth: selector_depth, capped by
	// max_depth when that is set (spec/speculation.md section 5.1); 0 in
	// other modes.
	FixedDepth int
	// ConfidenceFloor is the manifest's confidence_floor (nil: unset, the
	// engine picks by device; see Speculation.ConfidenceFloor).
	ConfidenceFloor *float64
}

// WeightStatus says whether a checkpoint's weights can be loaded.
type WeightStatus string

// Weight states.
const (
	// WeightsPresent: the weight files exist and their headers are valid.
	WeightsPresent WeightStatus = "present"
	// WeightsMissing: model.safetensors, the index or a shard is absent, or
	// a file is a Git LFS pointer: the checkpoint was not (fully)
	// downloaded.
	WeightsMissing WeightStatus = "missing"
	// WeightsInvalid: the files exist but break the safetensors or index
	// rules.
	WeightsInvalid WeightStatus = "invalid"
	// WeightsNone: the draft declares weights = false; nothing is read.
	WeightsNone WeightStatus = "none"
)

// Weights is the state of a checkpoint's weight files, found from their
// headers without reading tensor data.
type Weights struct {
	Status WeightStatus
	// Files are the weight files, relative to the checkpoint folder, when
	// present.
	Files []string
	// Tensors is the number of tensors; Bytes the total size of the files.
	Tensors int
	Bytes   int64
	// Problem says what is wrong and how to fix it, when not present.
	Problem string
	// Err is the loader's error, when not present.
	Err error
}

// Ready reports whether the plan can be loaded: nil when every weight file is
// present, else an *Error of kind ErrWeightsMissing (when any checkpoint is
// missing weights) or ErrWeightsInvalid naming every problem.
func (p *Plan) Ready() error {
	return p.readyErr
}
