package qwen35moe_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/qwen35/qwen35test"
	"github.com/specula-dev/specula/arch/qwen35moe"
	"github.com/specula-dev/specula/internal/synth"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/registry"
)

// benchShape is Qwen3.5-35B-A3B's layer shapes (H 2048, 16/2 heads of 256,
// delta-net 16/32 heads of 128, top 8 experts of width 512, a shared
// expert of 512) with 4 layers (3 delta-net, 1 attention), 32 of the 256
// experts and the vocabulary cut to 32768, so the float32 checkpoint
// (2.7 GB) fits a CPU machine: a token reads the same expert shapes as in
// the release, from a smaller pool.
func benchShape(dtype synth.DType) synth.Qwen35 {
	q, err := synth.Qwen35Shape("35B-A3B", 4)
	if err != nil {
		panic(err)
	}
	q.Experts, q.Vocab, q.DType = 32, 32768, dtype
	return q
}

// benchModel writes the random checkpoint with synth (once per benchmark
// run, in a temporary folder) and loads it as the engine does, computing
// in float32 on the CPU (MLX's x86 backend is only fast for float32 matmul)
// and bfloat16 on a GPU.
func benchModel(b *testing.B) *qwen35moe.Model {
	dtype, store := mlx.Float32, synth.Float32
	var m *qwen35moe.Model
	err := mlx.Do(context.Background(), func() error {
		if mlx.CurrentDevice() == mlx.GPU {
			dtype, store = mlx.BFloat16, synth.BFloat16
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	q := benchShape(store)
	dir := filepath.Join(b.TempDir(), "target")
	if err := q.Write(dir); err != nil {
		b.Fatal(err)
	}
	err = mlx.Do(context.Background(), func() error {
		raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			return err
		}
		v, _, err := registry.Default.Build("Qwen3_5MoeForCausalLM", registry.Config{Dir: dir, JSON: raw, DType: dtype})
		if err != nil {
			return err
		}
		m = v.(*qwen35moe.Model)
		ck, err := loader.OpenCheckpoint(dir)
		if err != nil {
			return err
		}
		defer ck.Close()
		tensors, err := ck.Arrays()
		if err != nil {
			return err
		}
		if err := m.LoadWeights(tensors); err != nil {
			return err
		}
		b.Logf("benchmark model: %d layers, H %d, %d experts (top %d, width %d), V %d, %.2fB parameters (%.2fB active), %s on the %s",
			m.NumLayers(), m.Info().HiddenSize, q.Experts, q.TopK, q.ExpertSize, q.Vocab, float64(q.Params())/1e9, float64(q.ActiveParams())/1e9, dtype, mlx.CurrentDevice())
		return mlx.Eval(m.Weights()...) // read the weights before timing
	})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkMoEDecode measures single-token greedy decoding after a
// 128-token prefill: each step routes one token to 8 experts per layer
// (unsorted gather matmuls).
func BenchmarkMoEDecode(b *testing.B) {
	m := benchModel(b)
	defer mlx.Do(context.Background(), func() error { m.Free(); return nil })
	qwen35test.BenchDecode(b, m, 128)
}

// BenchmarkMoEVerify8 measures an 8-token verification round (an anchor
// and 7 drafts) after a 128-token prefill: 64 row–expert pairs per layer,
// sorted by expert.
func BenchmarkMoEVerify8(b *testing.B) {
	m := benchModel(b)
	defer mlx.Do(context.Background(), func() error { m.Free(); return nil })
	qwen35test.BenchVerify(b, m, 128, 8)
}

// BenchmarkShardedLoad measures what one rank of a tensor-parallel load
// reads and holds (the benchmark model's float32 checkpoint, 2.7 GB): the
// bytes its read calls returned (rchar of /proc/self/io, Linux), the bytes
// of the weights it keeps, and MLX's peak memory, from opening the
// checkpoint to its weights evaluated. "cut whole" is a rank that reads
// every tensor whole and cuts it with ops (the arrays of MLX's loader
// called directly, which loader.PartOf does not know), for comparison.
// SPECULA_BENCH_CHECKPOINT names another checkpoint folder to measure (one
// model.safetensors; a dense or MoE Qwen3.5, loaded in float32).
func BenchmarkShardedLoad(b *testing.B) {
	dir := os.Getenv("SPECULA_BENCH_CHECKPOINT")
	if dir == "" {
		dir = filepath.Join(b.TempDir(), "target")
		if err := benchShape(synth.Float32).Write(dir); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name        string
		rank, ranks int
		whole       bool
	}{
		{"1 rank", 0, 1, false},
		{"rank 0 of 2", 0, 2, false},
		{"rank 0 of 2, cut whole", 0, 2, true},
		{"rank 0 of 4", 0, 4, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			var read, kept, peak int64
			for range b.N {
				err := mlx.Do(context.Background(), func() error {
					r, k, p, err := shardedLoad(dir, c.rank, c.ranks, c.whole)
					read, kept, peak = r, k, p
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			if read >= 0 {
				b.ReportMetric(float64(read)/1e6, "read-MB/op")
			}
			b.ReportMetric(float64(kept)/1e6, "kept-MB/op")
			b.ReportMetric(float64(peak)/1e6, "peak-MB/op")
		})
	}
}

// shardedLoad loads the checkpoint at dir as rank of ranks and returns the
// bytes read (-1 where /proc/self/io is missing), kept and MLX's peak.
func shardedLoad(dir string, rank, ranks int, whole bool) (read, kept, peak int64, err error) {
	ck, err := loader.OpenCheckpoint(dir)
	if err != nil {
		return 0, 0, 0, err
	}
	defer ck.Close()
	v, _, err := registry.Default.Build(ck.Config.Architecture, registry.Config{Dir: dir, JSON: ck.Config.Raw, DType: mlx.Float32})
	if err != nil {
		return 0, 0, 0, err
	}
	m := v.(interface {
		PlanShard(rank, ranks int) error
		LoadWeights(map[string]*mlx.Array) error
		Weights() []*mlx.Array
		Free()
	})
	defer m.Free()
	if err := m.PlanShard(rank, ranks); err != nil {
		return 0, 0, 0, err
	}
	mlx.ClearCache()
	mlx.ResetPeakMemory()
	before := readBytes()
	var tensors map[string]*mlx.Array
	if whole {
		tensors, err = mlx.LoadSafetensors(filepath.Join(dir, loader.SingleFileName))
	} else {
		tensors, err = ck.Arrays()
	}
	if err != nil {
		return 0, 0, 0, err
	}
	if err := m.LoadWeights(tensors); err != nil {
		return 0, 0, 0, err
	}
	for _, a := range m.Weights() {
		kept += a.NBytes()
	}
	if err := mlx.Eval(m.Weights()...); err != nil {
		return 0, 0, 0, err
	}
	read = -1
	if before >= 0 {
		read = readBytes() - before
	}
	return read, kept, mlx.PeakMemory(), nil
}

// readBytes is the bytes this process's read calls have returned (rchar of
// /proc/self/io), or -1 where that file is missing.
func readBytes() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
