// Package model defines the capability interfaces that architectures
// implement and the speculation core consumes: Model (a target), DraftTarget
// (what a DFlash-style draft needs from its target), Draft, BlockDraft and
// Selector.
//
// Conventions. Every tensor is an mlx.Array with batch size B = 1 in
// practice. L is the number of rows of a forward, H the hidden size, V the
// vocabulary size, F the width of the target features a draft conditions on
// (nTaps·H for a DFlash target). Row i of a forward sits at slot
// SeqOffsets[0]+i: the token at slot S is written to every cache at S, and a
// cache's Offset is the slot the next write lands on. Weights are stored
// [out, in].
//
// Capability names in manifests map one-to-one onto these interfaces:
// "model", "draft-target", "draft", "block-draft", "selector". The registry
// proves them by type assertion; the speculation core uses a capability only
// when the manifest declares it.
package model

import (
	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
)

// Batch is the input of one forward.
type Batch struct {
	// InputIDs holds the token ids [B, L] (int32); nil for a context-only
	// draft call.
	InputIDs *mlx.Array
	// SeqOffsets is the absolute slot of the first row of each sequence.
	SeqOffsets []int
	// SeqQueryLens is the number of real rows of each sequence; rows past it
	// are right padding and must not change any cache state. Nil means every
	// row is real.
	SeqQueryLens []int
	// Hidden holds draft conditioning rows [B, C, F] (the target features of
	// the slots SeqOffsets[0] … SeqOffsets[0]+C−1); nil for target forwards
	// and block-only draft calls.
	Hidden *mlx.Array
}

// Info describes the sizes a draft is checked against, and the context a
// request may fill.
type Info struct {
	HiddenSize int // H
	VocabSize  int // V, the width of the logits
	NumLayers  int // decoder layers
	// ContextLength is the number of positions the model was trained for
	// (config.json's max_position_embeddings); 0 when unknown. Generation
	// beyond it is allowed but may degrade.
	ContextLength int
}

// Model is a target: a decoder that turns token ids into logits.
type Model interface {
	// LoadWeights binds the checkpoint's tensors (lazy arrays: nothing is
	// read until evaluated). It checks names and shapes and reports every
	// missing, unexpected and mis-shaped tensor in one error.
	LoadWeights(tensors map[string]*mlx.Array) error
	// NewCaches returns one fresh cache per layer.
	NewCaches() []cache.Cache
	// Forward runs the decoder over b.InputIDs [B, L] and returns the final
	// hidden states [B, L, H] (after the final norm) and aux: the
	// concatenated layer taps [B, L, F] when taps are set, else the hidden
	// states.
	Forward(b *Batch, caches []cache.Cache) (hidden, aux *mlx.Array)
	// Unembed maps hidden states [B, L, H] to logits [B, L, V].
	Unembed(hidden *mlx.Array) *mlx.Array
	// Info returns the model's sizes.
	Info() Info
}

// DraftTarget is what a DFlash-style draft needs from its target.
type DraftTarget interface {
	Model
	// TokenEmbeddings is the raw embedding-table lookup of ids [B, L]:
	// [B, L, H], no scaling.
	TokenEmbeddings(ids *mlx.Array) *mlx.Array
	// RawLogits applies the plain output head (lm_head or the tied
	// embedding) to hidden [B, L, H]: [B, L, V], with no multiplier or
	// soft-cap.
	RawLogits(hidden *mlx.Array) *mlx.Array
	// SetLayerTaps selects the layers whose outputs Forward returns as aux.
	// Tap i is the residual stream after decoder layer i (0-based), before
	// the final norm (Hugging Face's hidden_states[i+1]). ids must be
	// strictly ascending and below NumLayers; an empty list clears the taps.
	SetLayerTaps(ids []int) error
	// NumLayers is the number of decoder layers.
	NumLayers() int
}

// Draft is a draft model conditioned on its target.
type Draft interface {
	// LoadWeights binds the draft's tensors (see Model.LoadWeights).
	LoadWeights(tensors map[string]*mlx.Array) error
	// NewCaches returns one fresh cache per draft layer.
	NewCaches() []cache.Cache
	// Forward writes the context rows b.Hidden (slots SeqOffsets[0] …) and
	// the block b.InputIDs (the slots after them) into the draft caches in
	// one update per layer, and returns the block's hidden states
	// [B, Lb, H] (hidden = aux). A context-only call (no InputIDs) returns
	// nil, nil.
	Forward(b *Batch, targetCaches, draftCaches []cache.Cache) (hidden, aux *mlx.Array)
	// Unembed maps draft hidden states to logits [B, L, V].
	Unembed(hidden *mlx.Array) *mlx.Array
}

// BlockDraft is a draft that fills a block of mask positions in one forward.
type BlockDraft interface {
	Draft
	// BlockParams returns the trained block size and the mask token id.
	// A session drafts at most blockSize−1 tokens per round.
	BlockParams() (blockSize int, maskToken int32)
}

// BidirectionalBlock is an optional property of a BlockDraft, read by type
// assertion (like io.WriterTo; manifests do not declare it): the draft was
// trained on whole blocks — the anchor and blockSize−1 mask rows — whose rows
// attend to each other in both directions. Such a draft must always be run
// on the whole trained block, even when fewer drafts are wanted, or every
// row sees a different attention context than in training and acceptance
// collapses; the session then uses only the first proposals. Running the
// whole block never affects exactness (the target still verifies every
// draft), only the draft's quality and cost.
type BidirectionalBlock interface {
	BlockDraft
	// BidirectionalBlock reports whether some layer lets a block row see
	// the block rows after it (a non-causal layer). A draft whose layers
	// are all causal returns false: its first rows do not depend on later
	// ones, so a shorter block gives the same proposals.
	BidirectionalBlock() bool
}

// ChooseFunc is the sampler's callback for a Selector: for candidate ids
// [R, K] (int32) and their scores [R, K] it returns the chosen token per row
// [R] (int32) and the proposal distribution over the K candidates [R, K]
// (float32). Only the request's temperature applies: greedy picks the argmax
// (lowest index on ties) with a one-hot distribution.
type ChooseFunc func(ids, scores *mlx.Array) (tokens, probs *mlx.Array)

// Selector is a block draft that proposes each token conditioned on its
// predecessor among per-position candidates (DFlash2).
type Selector interface {
	BlockDraft
	// Select walks the candidate lattice for block rows hidden [1, n, H] with
	// their logits [1, n, V], starting from the anchor [1] (position 0's
	// predecessor), calling choose for each position (or once for all rows
	// when scores do not depend on the predecessor). It returns the chosen
	// tokens [1, n], the candidate ids [1, n, K] and the proposal
	// distributions [1, n, K]. The walk stays a lazy graph: no host sync.
	Select(hidden, logits, anchor *mlx.Array, choose ChooseFunc) (tokens, ids, probs *mlx.Array)
}

// GreedySelector is a Selector that can also make its greedy walk in one
// step (a fused kernel where the device has one), for requests at
// temperature 0. SelectGreedy returns what Select returns with a greedy
// choose — the argmax tokens [1, n] (lowest index on ties), the candidate
// ids [1, n, K] and one-hot proposals [1, n, K] — and each position's
// largest probability of its scores at temperature 1 [n] (float32); ok is
// false when it cannot serve the call (the caller then uses Select).
type GreedySelector interface {
	Selector
	SelectGreedy(hidden, logits, anchor *mlx.Array) (tokens, ids, probs, confidence *mlx.Array, ok bool)
}

// TargetUser is implemented by drafts that borrow from their target (the
// token embeddings and the output head) and condition on its layer taps.
// AttachTarget validates the draft against the target (hidden size,
// vocabulary, tap ids, mask token) and sets the target's taps; it is called
// before LoadWeights.
type TargetUser interface {
	AttachTarget(t DraftTarget) error
}
