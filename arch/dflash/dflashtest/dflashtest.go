// Package dflashtest holds what the DFlash and DFlash2 tests share: reading
// the dflash-tiny and dflash2-tiny fixtures (tiny random drafts paired with
// the qwen35-tiny target, with the z-lab reference's outputs) and building
// that target. It is imported by tests only.
package dflashtest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/sample"
	"github.com/specula-dev/specula/speculation"
)

// Fixture is one draft fixture folder.
type Fixture struct {
	Dir    string
	Config []byte // config.json
	Ref    Reference
}

// Round is one round of a recorded speculative loop.
type Round struct {
	Start             int     `json:"start"`
	VerifySize        int     `json:"verify_size"`
	BlockIDs          []int32 `json:"block_ids"` // the anchor, then the drafts
	DraftProposal     []int32 `json:"draft_proposal"`
	AcceptedDrafts    int     `json:"accepted_drafts"`
	AcceptanceLength  int     `json:"acceptance_length"`
	Bonus             int32   `json:"bonus"`
	DraftNaiveArgmax  []int32 `json:"draft_naive_argmax"`
	ScriptedCorrectly int     `json:"scripted_correct_drafts"`
}

// Loop is a recorded speculative loop.
type Loop struct {
	BlockSize         int     `json:"block_size"`
	EmittedIDs        []int32 `json:"emitted_ids"`
	AcceptanceLengths []int   `json:"acceptance_lengths"`
	Rounds            []Round `json:"rounds"`
}

// Reference is the part of reference.json the tests read.
type Reference struct {
	PromptIDs       []int32 `json:"prompt_ids"`
	TargetGreedyIDs []int32 `json:"target_greedy_ids"`
	BlockIDs        []int32 `json:"block_ids"`
	BlockPositions  []int   `json:"block_positions"`
	// DraftArgmaxTokens is the argmax of the single block's draft logits.
	DraftArgmaxTokens []int32 `json:"draft_argmax_tokens"`
	SpecLoop          Loop    `json:"spec_loop"`
	Scripted          Loop    `json:"scripted_spec_loop_with_draft_shadow"`
}

// Load reads the named fixture ("dflash-tiny", "dflash2-tiny").
func Load(t testing.TB, name string) *Fixture {
	t.Helper()
	f := &Fixture{}
	f.Dir, f.Config = fixtures.Load(t, name, &f.Ref)
	return f
}

// Tensors loads the draft checkpoint's tensors (lazy).
func (f *Fixture) Tensors(t *mlxtest.T) map[string]*mlx.Array {
	return fixtures.Arrays(t, f.Dir, "model.safetensors")
}

// RefTensor returns one tensor of reference.safetensors as float32 (ids too).
func (f *Fixture) RefTensor(t *mlxtest.T, name string) *mlx.Array {
	return fixtures.Reference(t, f.Dir, name)
}

// RefInts returns one integer tensor of reference.safetensors.
func (f *Fixture) RefInts(t *mlxtest.T, name string) []int32 {
	t.Helper()
	return t.Int32s(mlx.AsType(f.RefTensor(t, name), mlx.Int32))
}

// Target builds the qwen35-tiny target in float32 through the registry,
// with its weights.
func Target(t *mlxtest.T) *qwen35.Model {
	t.Helper()
	dir := fixtures.Dir(t, "qwen35-tiny")
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	t.NoErr(err)
	v, _, err := registry.Default.Build("Qwen3_5ForCausalLM", registry.Config{Dir: dir, JSON: cfg, DType: mlx.Float32})
	t.NoErr(err)
	m := v.(*qwen35.Model)
	tensors, err := mlx.LoadSafetensors(filepath.Join(dir, "model.safetensors"))
	t.NoErr(err)
	t.NoErr(m.LoadWeights(tensors))
	return m
}

// Draft builds the fixture's draft through the registry (as a program
// would), attaches it to target and loads its weights.
func (f *Fixture) Draft(t *mlxtest.T, target model.DraftTarget) model.BlockDraft {
	t.Helper()
	var arch struct {
		Architectures []string `json:"architectures"`
	}
	t.NoErr(json.Unmarshal(f.Config, &arch))
	v, _, err := registry.Default.Build(arch.Architectures[0], registry.Config{Dir: f.Dir, JSON: f.Config, DType: mlx.Float32})
	t.NoErr(err)
	d := v.(model.BlockDraft)
	t.NoErr(d.(model.TargetUser).AttachTarget(target))
	t.NoErr(d.LoadWeights(f.Tensors(t)))
	return d
}

// QuantizedDraft writes the fixture's draft in MLX's layout quantized with q
// (what `specula quantize` writes: the architecture's ExportMLX, then
// loader.WriteMLX) into a temporary folder, and loads that folder through
// the registry and loader.OpenCheckpoint as a program would, attached to
// target. It also returns the draft built the same way from the written
// weights dequantized (dense layers holding exactly the values the
// quantized ones represent): the two differ only in how they multiply.
func (f *Fixture) QuantizedDraft(t *mlxtest.T, target model.DraftTarget, q mlx.Quant) (quantized, dequantized model.BlockDraft) {
	t.Helper()
	var arch struct {
		Architectures []string `json:"architectures"`
	}
	t.NoErr(json.Unmarshal(f.Config, &arch))
	build := func(dir string, config []byte, tensors map[string]*mlx.Array) model.BlockDraft {
		v, _, err := registry.Default.Build(arch.Architectures[0], registry.Config{Dir: dir, JSON: config, DType: mlx.Float32})
		t.NoErr(err)
		d := v.(model.BlockDraft)
		t.NoErr(d.(model.TargetUser).AttachTarget(target))
		t.NoErr(d.LoadWeights(tensors))
		t.NoErr(mlx.Eval(d.(model.WeightHolder).Weights()...)) // read before the folder goes
		return d
	}
	ex := build(f.Dir, f.Config, f.Tensors(t)).(interface {
		ExportMLX(map[string]*mlx.Array) (*loader.MLXModel, error)
	})
	src, err := loader.OpenCheckpoint(f.Dir)
	t.NoErr(err)
	defer src.Close()
	m, err := ex.ExportMLX(f.Tensors(t))
	t.NoErr(err)
	dir, err := os.MkdirTemp("", "quantized-draft-")
	t.NoErr(err)
	defer os.RemoveAll(dir)
	dst := filepath.Join(dir, "draft")
	t.NoErr(loader.WriteMLX(dst, src, m, loader.MLXOptions{Quant: q}))

	cfg, err := os.ReadFile(filepath.Join(dst, "config.json"))
	t.NoErr(err)
	ck, err := loader.OpenCheckpoint(dst)
	t.NoErr(err)
	defer ck.Close()
	tensors, err := ck.Arrays()
	t.NoErr(err)
	quantized = build(dst, cfg, tensors)

	dense := map[string]*mlx.Array{}
	for name, a := range tensors {
		base, ok := strings.CutSuffix(name, ".weight")
		s, quant := tensors[base+".scales"]
		switch {
		case ok && quant:
			dense[name] = mlx.Dequantize(a, s, tensors[base+".biases"], q, mlx.Float32)
		case strings.HasSuffix(name, ".scales") || strings.HasSuffix(name, ".biases"):
		default:
			dense[name] = a
		}
	}
	return quantized, build(f.Dir, f.Config, dense)
}

// Features runs ids through a fresh set of target caches and returns the
// target's aux (its layer taps, [1, L, F]).
func Features(target model.Model, ids []int32) *mlx.Array {
	caches := target.NewCaches()
	defer func() {
		for _, c := range caches {
			c.Free()
		}
	}()
	_, aux := target.Forward(&model.Batch{
		InputIDs:     mlx.FromInt32s(ids, 1, len(ids)),
		SeqOffsets:   []int{0},
		SeqQueryLens: []int{len(ids)},
	}, caches)
	return mlx.Contiguous(aux)
}

// MaxAbs is max |a − b| (shapes must broadcast).
func MaxAbs(t *mlxtest.T, a, b *mlx.Array) float64 {
	t.Helper()
	v, err := mlx.Max(mlx.Abs(mlx.Subtract(mlx.AsType(a, mlx.Float32), mlx.AsType(b, mlx.Float32))), false).Item()
	t.NoErr(err)
	return float64(v)
}

// Sequence is the prompt followed by the target's greedy continuation: the
// tokens of slots 0 … len−1 in every recorded loop (all of them are
// lossless).
func (f *Fixture) Sequence() []int32 {
	return append(append([]int32(nil), f.Ref.PromptIDs...), f.Ref.TargetGreedyIDs...)
}

// Proposal is one draft proposal seen by the speculation core.
type Proposal struct {
	Anchor int32   // the token the block was anchored on
	Tokens []int32 // the drafts
}

// SpecRun is the outcome of RunSpeculative.
type SpecRun struct {
	Tokens    []int32           // emitted tokens
	Proposals []Proposal        // every proposal, in round order
	Stats     speculation.Stats // the session's counters
}

// RunSpeculative decodes budget tokens greedily after prompt with the
// speculation core over target and draft (fresh caches), as a program
// would, and records every proposal. Every round drafts up to 7 tokens
// (capped by the block and the budget), like the fixture's loops: a selector
// session has that fixed depth by definition, and a plain block draft is
// pinned to it (Config.FixedDepth) instead of following the adaptive
// controller.
func RunSpeculative(t *mlxtest.T, target model.Model, draft model.BlockDraft, useSelector bool, prompt []int32, budget int) *SpecRun {
	t.Helper()
	return RunSpeculativeAt(t, target, draft, useSelector, prompt, budget, 7)
}

// RunSpeculativeAt is RunSpeculative with every round drafting up to depth
// tokens (the selector's fixed depth, or the plain session's pinned one).
func RunSpeculativeAt(t *mlxtest.T, target model.Model, draft model.BlockDraft, useSelector bool, prompt []int32, budget, depth int) *SpecRun {
	t.Helper()
	tc, dc := target.NewCaches(), draft.NewCaches()
	defer func() {
		for _, c := range append(tc, dc...) {
			c.Free()
		}
	}()
	rec := &recordingDrafter{BlockDrafter: speculation.NewBlockDrafter(draft, tc, dc, useSelector), t: t}
	cfg := speculation.Config{Target: target, TargetCaches: tc, Drafter: rec, SelectorDepth: depth}
	if !useSelector {
		cfg.FixedDepth = depth
	}
	core := speculation.NewCore(cfg)
	sess := core.Open(speculation.Request{Sampler: sample.New(sample.Options{}, prompt)})
	ctx := context.Background()
	seed, pos, err := sess.Prefill(ctx, prompt)
	t.NoErr(err)
	res, err := speculation.Run(ctx, sess.Decoder(seed, pos), budget, func(int32) error { return nil })
	t.NoErr(err)
	sess.Close()
	return &SpecRun{Tokens: res.Tokens, Proposals: rec.proposals, Stats: *sess.Stats()}
}

// recordingDrafter serves the block drafter's sessions and records what each
// proposal drafted.
type recordingDrafter struct {
	*speculation.BlockDrafter
	t         *mlxtest.T
	proposals []Proposal
}

func (r *recordingDrafter) Open(s *sample.Sampler) speculation.DraftSession {
	return &recordingSession{DraftSession: r.BlockDrafter.Open(s), r: r}
}

type recordingSession struct {
	speculation.DraftSession
	r *recordingDrafter
}

// Propose reads the drafts back as they are proposed (a host sync the core
// itself would not do; harmless in a test).
func (s *recordingSession) Propose(current *mlx.Array, max int) *speculation.Candidates {
	c := s.DraftSession.Propose(current, max)
	if c != nil {
		s.r.proposals = append(s.r.proposals, Proposal{Anchor: s.r.t.Int32s(current)[0], Tokens: s.r.t.Int32s(c.Tokens)})
	}
	return c
}

// CheckShallowProposals checks a run drafted at depth (< blockSize−1)
// against the rounds of the fixture's spec_loop that drafted whole blocks:
// each round's drafts must be the first drafts of the fixture's matching
// round (want(round) gives them), because the session runs the whole trained
// block and keeps its first proposals. (The fixture's last rounds drafted
// shorter blocks for the budget, and their drafts differ: they are not
// compared.) Rounds line up as in the fixture's own
// comparison (every round accepts nothing, so round r anchors where fixture
// round r−1 did). It returns how many rounds were compared.
func CheckShallowProposals(t *mlxtest.T, run *SpecRun, f *Fixture, depth int, want func(Round) []int32) int {
	t.Helper()
	loop := f.Ref.SpecLoop
	compared := 0
	for r := 1; r < len(run.Proposals) && r-1 < len(loop.Rounds); r++ {
		got, round := run.Proposals[r], loop.Rounds[r-1]
		if got.Anchor != round.BlockIDs[0] {
			t.Errorf("depth %d: round %d anchored on %d, fixture round %d on %d", depth, r, got.Anchor, r-1, round.BlockIDs[0])
			continue
		}
		if len(got.Tokens) != depth || len(round.BlockIDs) != loop.BlockSize {
			continue // the budget cut this round, or the fixture's, shorter
		}
		compared++
		if w := want(round)[:depth]; !slices.Equal(got.Tokens, w) {
			t.Errorf("depth %d: round %d drafted %v; the fixture's whole block starts %v", depth, r, got.Tokens, w)
		}
	}
	return compared
}
