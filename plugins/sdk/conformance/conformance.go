// Package conformance tests a plugin's architectures with `go test`: it
// serves them with the SDK's server over a real in-process gRPC connection
// and runs the draft session protocol's scenarios against them — the
// spirit of spec/speculation.md's S1–S9 that apply across the wire.
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, myplugin.Plugin(), conformance.Options{})
//	}
//
// The scenarios speak the wire protocol from the test's goroutine, as the
// host does, and check every answer as the host would (frontiers, settle
// offsets, proposal validation). Generation compares speculative greedy
// decoding through the plugin with plain greedy decoding of a fake Markov
// target. A plugin that passes can still propose badly; it cannot make the
// host produce wrong output.
package conformance

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/plugins/internal/wire"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/plugins/sdk"
)

// Options configure a run.
type Options struct {
	// Architectures limits the run to these names (default: all).
	Architectures []string
	// CheckpointDir is the draft checkpoint given to Load (default: a
	// temporary folder holding ConfigJSON as config.json).
	CheckpointDir string
	// ConfigJSON is the config sent with Load (default "{}").
	ConfigJSON []byte
	// Target is the fake target the draft is paired with.
	Target Target
	// Timeout bounds each call (default 30 s).
	Timeout time.Duration
}

// Run runs every scenario against each architecture of p, each as a
// subtest.
func Run(t *testing.T, p sdk.Plugin, opts Options) {
	t.Helper()
	opts.Target = opts.Target.withDefaults()
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.ConfigJSON == nil {
		opts.ConfigJSON = []byte("{}")
	}
	if opts.CheckpointDir == "" {
		opts.CheckpointDir = t.TempDir()
		if err := os.WriteFile(filepath.Join(opts.CheckpointDir, "config.json"), opts.ConfigJSON, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("describe", func(t *testing.T) { describe(t, p) })
	for _, a := range p.Architectures {
		if len(opts.Architectures) > 0 && !slices.Contains(opts.Architectures, a.Name) {
			continue
		}
		t.Run(a.Name, func(t *testing.T) {
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) {
					r := newRig(t, p, a, opts)
					sc.run(t, r)
				})
			}
		})
	}
}

func describe(t *testing.T, p sdk.Plugin) {
	c := Serve(t, p)
	d, err := c.Describe(context.Background(), &draftv1.DescribeRequest{ProtocolVersions: []uint32{sdk.ProtocolVersion}})
	if err != nil {
		t.Fatalf("Describe: %v", err)
	}
	if d.GetProtocolVersion() != sdk.ProtocolVersion || d.GetPluginVersion() != p.Version || d.GetName() != p.Name {
		t.Fatalf("Describe = %v, want plugin %s version %s protocol %d", d, p.Name, p.Version, sdk.ProtocolVersion)
	}
	if len(d.GetArchitectures()) != len(p.Architectures) {
		t.Fatalf("Describe lists %d architectures, the plugin has %d", len(d.GetArchitectures()), len(p.Architectures))
	}
	for _, a := range d.GetArchitectures() {
		if !slices.Contains(a.GetCapabilities(), "draft") {
			t.Errorf("architecture %s does not declare \"draft\"", a.GetName())
		}
	}
}

// rig is one scenario's connection with the draft loaded.
type rig struct {
	t      *testing.T
	c      draftv1.DraftClient
	target *FakeTarget
	load   *draftv1.LoadResponse
	opts   Options
	fdt    string
}

func newRig(t *testing.T, p sdk.Plugin, a sdk.Architecture, opts Options) *rig {
	r := &rig{t: t, c: Serve(t, p), target: NewFakeTarget(opts.Target), opts: opts}
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := r.c.Load(ctx, &draftv1.LoadRequest{
		Architecture: a.Name, CheckpointDir: opts.CheckpointDir, ConfigJson: opts.ConfigJSON, Dtype: "float32", Device: "cpu",
		Target: &draftv1.TargetInfo{HiddenSize: int64(opts.Target.Hidden), VocabSize: int64(opts.Target.Vocab), NumLayers: int64(opts.Target.Layers)},
	})
	if err != nil {
		t.Fatalf("Load %s: %v", a.Name, err)
	}
	r.load = resp
	if resp.GetMaxDepth() < 1 {
		t.Fatalf("Load: max_depth %d, want at least 1", resp.GetMaxDepth())
	}
	if resp.GetNeedsFeatures() != a.NeedsFeatures {
		t.Fatalf("Load: needs_features %v, but Describe says %v", resp.GetNeedsFeatures(), a.NeedsFeatures)
	}
	if resp.GetNeedsFeatures() {
		taps := make([]int, len(resp.GetLayerTaps()))
		for i, x := range resp.GetLayerTaps() {
			taps[i] = int(x)
		}
		if err := r.target.SetLayerTaps(taps); err != nil {
			t.Fatalf("Load: layer_taps %v: %v", taps, err)
		}
		if want := max(1, len(taps)) * opts.Target.Hidden; int(resp.GetFeatureWidth()) != want {
			t.Fatalf("Load: feature_width %d, want %d", resp.GetFeatureWidth(), want)
		}
	}
	return r
}

func (r *rig) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.opts.Timeout)
}

func (r *rig) open() uint64 {
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := r.c.Open(ctx, &draftv1.OpenRequest{RequestId: r.t.Name()})
	if err != nil {
		r.t.Fatalf("Open: %v", err)
	}
	return resp.GetSessionId()
}

// features returns the fake target's feature rows for tokens, as F32.
func (r *rig) features(tokens []int32) *draftv1.Tensor {
	if !r.load.GetNeedsFeatures() {
		return nil
	}
	copies := max(1, len(r.load.GetLayerTaps()))
	var v []float32
	for _, id := range tokens {
		for range copies {
			v = append(v, r.target.embed[id]...)
		}
	}
	return &draftv1.Tensor{Dtype: "F32", Shape: []int64{1, int64(len(tokens)), int64(copies * r.opts.Target.Hidden)}, Data: wire.Float32Bytes(v)}
}

func (r *rig) committed(id uint64, position int, tokens []int32) (int64, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := r.c.Committed(ctx, &draftv1.CommittedRequest{SessionId: id, Position: int64(position), Tokens: tokens, Features: r.features(tokens)})
	return resp.GetFrontier(), err
}

func (r *rig) mustCommit(id uint64, position int, tokens []int32, wantFrontier int) {
	r.t.Helper()
	f, err := r.committed(id, position, tokens)
	if err != nil {
		r.t.Fatalf("Committed(%d tokens at %d): %v", len(tokens), position, err)
	}
	if int(f) != wantFrontier {
		r.t.Fatalf("Committed(%d tokens at %d): frontier %d, want %d", len(tokens), position, f, wantFrontier)
	}
}

func (r *rig) settle(id uint64, want int) {
	r.t.Helper()
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := r.c.Settle(ctx, &draftv1.SettleRequest{SessionId: id})
	if err != nil {
		r.t.Fatalf("Settle: %v", err)
	}
	if int(resp.GetCtxOffset()) != want {
		r.t.Fatalf("Settle: ctx_offset %d, want the frontier %d", resp.GetCtxOffset(), want)
	}
}

// propose asks greedily and validates the answer as the host does.
func (r *rig) propose(id uint64, anchor int32, max uint32) []int32 {
	r.t.Helper()
	ctx, cancel := r.ctx()
	defer cancel()
	resp, err := r.c.Propose(ctx, &draftv1.ProposeRequest{SessionId: id, Anchor: anchor, Max: max, Seed: 1})
	if err != nil {
		r.t.Fatalf("Propose(anchor %d, max %d): %v", anchor, max, err)
	}
	if len(resp.GetTokens()) > 0 {
		if err := plugins.ValidateProposal(resp, int(max), r.opts.Target.Vocab); err != nil {
			r.t.Fatalf("Propose(anchor %d, max %d): the host would reject the answer: %v", anchor, max, err)
		}
	}
	return resp.GetTokens()
}

func (r *rig) close(id uint64) error {
	ctx, cancel := r.ctx()
	defer cancel()
	_, err := r.c.Close(ctx, &draftv1.CloseRequest{SessionId: id})
	return err
}

// randomTokens returns n tokens of the fake vocabulary.
func (r *rig) randomTokens(seed uint64, n int) []int32 {
	g := rand.New(rand.NewPCG(seed, 3))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(g.IntN(r.opts.Target.Vocab))
	}
	return out
}
