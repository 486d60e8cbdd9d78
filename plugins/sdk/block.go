package sdk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/plugins/internal/wire"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/sample"
	"github.com/specula-dev/specula/speculation"
)

// blockLoaded is a loaded block draft, served by speculation.BlockDrafter
// exactly as the engine serves a built-in one.
type blockLoaded struct {
	draft        model.BlockDraft
	target       *standInTarget // non-nil when the draft uses its target
	resp         *draftv1.LoadResponse
	featureDType mlx.DType
	featureWidth int
}

// loadBlock attaches the target, loads the weights and answers Load. It runs
// on the MLX worker. With cfg.CheckOnly the weights are bound (names and
// shapes checked) but not read.
func loadBlock(cfg *LoadConfig, d model.BlockDraft) (loaded, error) {
	b := &blockLoaded{draft: d, featureDType: mlx.Float32, featureWidth: cfg.Target.HiddenSize}
	if cfg.DType == mlx.BFloat16 || cfg.DType == mlx.Float16 {
		b.featureDType = cfg.DType
	}
	if u, ok := d.(model.TargetUser); ok {
		t, err := newStandInTarget(cfg)
		if err != nil {
			return nil, err
		}
		if err := u.AttachTarget(t); err != nil {
			t.free()
			return nil, fmt.Errorf("attaching the target: %w", err)
		}
		b.target = t
		if len(t.taps) > 0 {
			b.featureWidth = len(t.taps) * cfg.Target.HiddenSize
		}
	}
	tensors, err := readWeights(cfg.CheckpointDir)
	if err != nil {
		b.free()
		return nil, err
	}
	if err := d.LoadWeights(tensors); err != nil {
		b.free()
		return nil, fmt.Errorf("loading weights: %w", err)
	}
	// LoadWeights binds lazily; only this evaluation reads the data.
	if h, ok := d.(model.WeightHolder); ok && !cfg.CheckOnly {
		if err := mlx.Eval(h.Weights()...); err != nil {
			b.free()
			return nil, err
		}
	}
	mlx.Sweep()
	if err := checkCaches(d); err != nil {
		b.free()
		return nil, err
	}
	bs, mask := d.BlockParams()
	if bs < 2 {
		b.free()
		return nil, fmt.Errorf("block size %d is below 2", bs)
	}
	fd, _ := wire.DTypeName(b.featureDType)
	b.resp = &draftv1.LoadResponse{
		BlockSize:     uint32(bs),
		MaskToken:     mask,
		FeatureWidth:  uint32(b.featureWidth),
		FeatureDtype:  fd,
		NeedsFeatures: true,
		MaxDepth:      uint32(bs - 1),
		Dist:          &draftv1.DistInfo{Kind: draftv1.DistKind_DIST_KIND_DENSE, Width: uint32(cfg.Target.VocabSize)},
	}
	if _, ok := d.(model.Selector); ok {
		b.resp.Dist = &draftv1.DistInfo{Kind: draftv1.DistKind_DIST_KIND_SPARSE}
	}
	if b.target != nil {
		for _, t := range b.target.taps {
			b.resp.LayerTaps = append(b.resp.LayerTaps, uint32(t))
		}
	}
	return b, nil
}

// checkCaches makes one set of the draft's caches, as every session will:
// a draft session keeps its context offset in the first cache, so a draft
// without caches would fail each Open with an index out of range.
func checkCaches(d model.BlockDraft) error {
	caches := d.NewCaches()
	defer func() {
		for _, c := range caches {
			if c != nil {
				c.Free()
			}
		}
	}()
	if len(caches) == 0 {
		return errors.New("NewCaches returned no cache: a block draft returns one cache per draft layer, at least one (the draft session keeps its context offset in the first)")
	}
	for i, c := range caches {
		if c == nil {
			return fmt.Errorf("NewCaches returned a nil cache at index %d", i)
		}
	}
	return nil
}

// readWeights reads a checkpoint folder's tensors; a folder without weight
// files (a draft that has none) gives an empty map.
func readWeights(dir string) (map[string]*mlx.Array, error) {
	tensors := map[string]*mlx.Array{}
	if dir == "" {
		return tensors, nil
	}
	_, errSingle := os.Stat(filepath.Join(dir, loader.SingleFileName))
	_, errIndex := os.Stat(filepath.Join(dir, loader.SingleFileName+".index.json"))
	if errors.Is(errSingle, fs.ErrNotExist) && errors.Is(errIndex, fs.ErrNotExist) {
		return tensors, nil
	}
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	for _, shard := range ck.Shards() {
		arrays, err := mlx.LoadSafetensors(shard.Path())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", shard.Path(), err)
		}
		for name, a := range arrays {
			if info, ok := ck.Tensor(name); ok && info.Path == shard.Path() {
				tensors[name] = a
			}
		}
	}
	return tensors, nil
}

func (b *blockLoaded) response() *draftv1.LoadResponse { return b.resp }

func (b *blockLoaded) free() {
	_ = mlx.Do(context.Background(), func() error {
		if f, ok := b.draft.(interface{ Free() }); ok {
			f.Free()
		}
		if b.target != nil {
			b.target.free()
		}
		return nil
	})
}

// open gives the session its own draft caches and drafter, as the engine
// does per request.
func (b *blockLoaded) open() (session, error) {
	s := &blockSession{b: b, sampler: sample.New(sample.Options{}, nil)}
	err := safeDo(context.Background(), func() error {
		s.caches = b.draft.NewCaches()
		_, useSelector := b.draft.(model.Selector)
		s.drafter = speculation.NewBlockDrafter(b.draft, nil, s.caches, useSelector)
		s.sess = s.drafter.Open(s.sampler)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// blockSession runs one speculation draft session; the SDK tracks the
// frontier to check the host's runs before they reach it (a gap would
// panic there).
type blockSession struct {
	b        *blockLoaded
	caches   []cache.Cache
	drafter  *speculation.BlockDrafter
	sess     speculation.DraftSession
	sampler  *sample.Sampler // replaced in place before every proposal
	frontier int64
	closed   bool
}

func (s *blockSession) committed(position int64, tokens []int32, features *draftv1.Tensor) (int64, error) {
	n := int64(len(tokens))
	if position < 0 || position > s.frontier {
		return 0, protoErrorf("committed run at slot %d leaves slots %d..%d unfed (frontier %d)", position, s.frontier, position-1, s.frontier)
	}
	if n == 0 {
		return s.frontier, nil
	}
	if features == nil {
		return 0, protoErrorf("committed run at slot %d has no features; this draft needs them", position)
	}
	if len(features.Shape) != 3 || features.Shape[0] != 1 || features.Shape[1] != n || features.Shape[2] != int64(s.b.featureWidth) {
		return 0, protoErrorf("features shape %v, want [1 %d %d]", features.Shape, n, s.b.featureWidth)
	}
	err := safeDo(context.Background(), func() error {
		x, err := wire.Decode(features)
		if err != nil {
			return protoErrorf("features: %v", err)
		}
		if x.DType() != s.b.featureDType {
			x = mlx.AsType(x, s.b.featureDType)
		}
		s.sess.Committed(mlx.FromInt32s(tokens, 1, len(tokens)), x, int(position))
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.frontier = max(s.frontier, position+n)
	return s.frontier, nil
}

func (s *blockSession) settle() (int64, error) {
	err := safeDo(context.Background(), func() error {
		s.sess.Settle()
		return nil
	})
	return s.frontier, err
}

func (s *blockSession) propose(req *draftv1.ProposeRequest) (*draftv1.ProposeResponse, error) {
	*s.sampler = *sample.New(samplingOptions(req), nil)
	resp := &draftv1.ProposeResponse{}
	err := safeDo(context.Background(), func() error {
		cand := s.sess.Propose(mlx.FromInt32s([]int32{req.GetAnchor()}, 1), int(req.GetMax()))
		if cand == nil {
			return nil
		}
		tokens, err := cand.Tokens.Int32s()
		if err != nil {
			return err
		}
		dist, err := encodeDist(cand.Dist)
		if err != nil {
			return err
		}
		resp.Tokens, resp.Dist = tokens, dist
		return nil
	})
	return resp, err
}

func (s *blockSession) close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return safeDo(context.Background(), func() error {
		s.sess.Close()
		for _, c := range s.caches {
			if c != nil {
				c.Free()
			}
		}
		return nil
	})
}

// samplingOptions turns a proposal's options into the plugin's sampler
// settings: seeded per round, so a proposal is reproducible.
func samplingOptions(req *draftv1.ProposeRequest) sample.Options {
	return sample.Options{
		Temperature: req.GetTemperature(),
		TopK:        int(req.GetTopK()),
		TopP:        req.GetTopP(),
		MinP:        req.GetMinP(),
		Seed:        req.GetSeed() ^ (req.GetRound()+1)*0x9e3779b97f4a7c15,
		UseSeed:     true,
	}
}

// encodeDist reads a proposal distribution into its wire form.
func encodeDist(d sample.Distribution) (*draftv1.Distribution, error) {
	probs, err := mlx.AsType(d.Probs, mlx.Float32).Float32s()
	if err != nil {
		return nil, err
	}
	out := &draftv1.Distribution{Rows: uint32(d.Probs.Dim(0)), Width: uint32(d.Probs.Dim(1)), Dense: d.Dense(), Probs: wire.Float32Bytes(probs)}
	if !d.Dense() {
		if out.Ids, err = mlx.AsType(d.IDs, mlx.Int32).Int32s(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
