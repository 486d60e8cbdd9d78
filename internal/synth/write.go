package synth

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/specula-dev/specula/loader"
)

// chunkValues is how many consecutive values of a tensor one generator
// draws. Each chunk has its own generator (chunkRand), so the chunks of a
// tensor are drawn in parallel and in any order; a chunk is a few
// milliseconds of drawing, which also bounds how long cancellation waits.
// It is part of the recipe: changing it changes every value.
const chunkValues = 1 << 20

// shardBytes is the most tensor bytes one weights file holds:
// huggingface_hub's default max_shard_size ("5GB", decimal), by which
// released checkpoints are split. A variable so that tests can shard small
// checkpoints.
var shardBytes int64 = 5_000_000_000

// metadata is every weights file's __metadata__, as transformers writes it
// plus who made the file.
var metadata = map[string]string{"format": "pt", "generator": "specula synth"}

// chunkRand returns the generator of chunk c (values c·chunkValues onwards)
// of the tensor called name in a checkpoint of the given seed: a PCG whose
// two seed words are the first 16 bytes of
// SHA-256(seed ‖ c ‖ name), read as little-endian uint64s, with seed and c
// written as 8 little-endian bytes each. The hash keeps the chunks'
// generators unrelated however close their seeds and positions are, and a
// tensor's values do not depend on which other tensors the checkpoint has.
func chunkRand(seed uint64, name string, c int64) *rand.Rand {
	h := sha256.New()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(c))
	h.Write(b[:])
	h.Write([]byte(name))
	sum := h.Sum(nil)
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
}

// storage returns the dtype s is stored in within a checkpoint of dtype.
func (s *spec) storage(dtype DType) loader.DType {
	if dtype == BFloat16 && !s.f32 {
		return loader.BF16
	}
	return loader.F32
}

func (s *spec) header(dtype DType) loader.TensorHeader {
	h := loader.TensorHeader{Name: s.name, DType: s.storage(dtype), Shape: make([]uint64, len(s.shape))}
	for i, d := range s.shape {
		h.Shape[i] = uint64(d)
	}
	return h
}

func (s *spec) bytes(dtype DType) int64 {
	return s.numel() * int64(s.storage(dtype).Bits()/8)
}

// chunks returns how many chunks s is drawn in.
func (s *spec) chunks() int64 { return (s.numel() + chunkValues - 1) / chunkValues }

// writeCheckpoint draws every tensor and writes the weights files and then
// config.json into dir. On failure, or once ctx is done, it stops and
// removes the weights files it wrote.
func writeCheckpoint(ctx context.Context, dir string, config map[string]any, specs []spec, dtype DType, seed uint64, progress func(written, total int64)) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfg, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return err
	}
	var total, written int64
	for i := range specs {
		total += specs[i].bytes(dtype)
	}
	wrote := func(n int) {
		written += int64(n)
		if progress != nil {
			progress(written, total)
		}
	}
	var files []string
	defer func() {
		if err != nil {
			for _, f := range files {
				os.Remove(f)
			}
		}
	}()
	shards := shard(specs, dtype)
	index := &loader.Index{WeightMap: map[string]string{}, TotalSize: uint64(total), HasTotalSize: true}
	for i, group := range shards {
		name := loader.ShardFileName(i, len(shards))
		path := filepath.Join(dir, name)
		if err := writeWeights(ctx, path, group, dtype, seed, wrote); err != nil {
			return err
		}
		files = append(files, path)
		for _, s := range group {
			index.WeightMap[s.name] = name
		}
	}
	if len(shards) > 1 {
		path := filepath.Join(dir, loader.IndexName)
		if err := loader.WriteIndex(path, index); err != nil {
			return err
		}
		files = append(files, path)
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), append(cfg, '\n'), 0o644)
}

// shard splits specs, in order, into groups of at most shardBytes
// (loader.ShardRuns). It returns one group at least.
func shard(specs []spec, dtype DType) [][]spec {
	sizes := make([]int64, len(specs))
	for i := range specs {
		sizes[i] = specs[i].bytes(dtype)
	}
	runs := loader.ShardRuns(sizes, shardBytes)
	if len(runs) == 0 {
		return [][]spec{nil}
	}
	out := make([][]spec, len(runs))
	for i, run := range runs {
		out[i] = specs[run[0]:run[1]]
	}
	return out
}

// writeWeights writes one safetensors file of specs at path: the header
// first, then the tensors' bytes as they are drawn. The file appears at path
// only once complete.
func writeWeights(ctx context.Context, path string, specs []spec, dtype DType, seed uint64, wrote func(int)) error {
	headers := make([]loader.TensorHeader, len(specs))
	for i := range specs {
		headers[i] = specs[i].header(dtype)
	}
	w, err := loader.Create(path, headers, metadata)
	if err != nil {
		return err
	}
	defer w.Abort()
	if err := stream(ctx, w, specs, w.Order(), dtype, seed, wrote); err != nil {
		return err
	}
	return w.Close()
}

// chunk is one chunk of one tensor on its way to the file: a worker draws
// it into buf and closes done; the writer then writes buf.
type chunk struct {
	s     *spec
	dtype loader.DType
	index int64 // which chunk of s
	buf   []byte
	done  chan struct{}
}

// stream draws the tensors specs[order[0]], specs[order[1]], ... chunk by
// chunk on runtime.GOMAXPROCS workers and writes their bytes to w in that
// order, calling wrote after each chunk. A dispatcher hands out the chunks
// in order, each with a buffer taken from a fixed set of 2 per worker, and
// queues them for the writer (this goroutine), which writes each when it is
// drawn and frees its buffer. Memory is those buffers, whatever the model's
// size; since buffers are taken and freed in the same order, the chunk the
// writer waits for always has one, so the pipeline cannot deadlock.
func stream(ctx context.Context, w io.Writer, specs []spec, order []int, dtype DType, seed uint64, wrote func(int)) error {
	workers := runtime.GOMAXPROCS(0)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel() // stops the dispatcher, which stops the workers
		wg.Wait()
	}()
	free := make(chan []byte, 2*workers)
	for range cap(free) {
		free <- nil // allocated by the first worker to use it
	}
	todo := make(chan *chunk)
	queue := make(chan *chunk, cap(free)) // never full: every queued chunk holds a buffer
	wg.Go(func() {
		defer close(queue)
		defer close(todo)
		for _, i := range order {
			s := &specs[i]
			for c := range s.chunks() {
				ch := &chunk{s: s, dtype: s.storage(dtype), index: c, done: make(chan struct{})}
				select {
				case ch.buf = <-free:
				case <-ctx.Done():
					return
				}
				queue <- ch
				select {
				case todo <- ch:
				case <-ctx.Done():
					return
				}
			}
		}
	})
	for range workers {
		wg.Go(func() {
			for ch := range todo {
				ch.draw(seed)
				close(ch.done)
			}
		})
	}
	for ch := range queue {
		select {
		case <-ch.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := w.Write(ch.buf); err != nil {
			return err
		}
		free <- ch.buf
		wrote(len(ch.buf))
	}
	return ctx.Err() // the dispatcher stops early only when ctx is done
}

// draw fills ch.buf with the chunk's values in its storage dtype, rounded
// to bfloat16 by bf16.
func (ch *chunk) draw(seed uint64) {
	start := ch.index * chunkValues
	n := min(chunkValues, ch.s.numel()-start)
	width := int64(ch.dtype.Bits() / 8)
	if int64(cap(ch.buf)) < n*width {
		ch.buf = make([]byte, 0, 4*chunkValues) // fits a chunk of either dtype
	}
	ch.buf = ch.buf[:n*width]
	r := chunkRand(seed, ch.s.name, ch.index)
	switch ch.dtype {
	case loader.BF16:
		for j := range n {
			binary.LittleEndian.PutUint16(ch.buf[2*j:], bf16(float32(ch.s.draw(r, start+j))))
		}
	case loader.F32:
		for j := range n {
			binary.LittleEndian.PutUint32(ch.buf[4*j:], math.Float32bits(float32(ch.s.draw(r, start+j))))
		}
	default:
		panic("synth: no drawing into " + ch.dtype.String())
	}
}

// bf16 rounds a float32 to bfloat16 bits, to nearest even.
func bf16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}
