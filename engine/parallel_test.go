package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/specula-dev/specula/distributed"
	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/speculation"
)

// Tensor parallelism on the CPU: the test binary doubles as a rank. With
// envRankJob set, TestMain runs the job it names (a JSON file) as one rank of
// a ring group on 127.0.0.1 and prints what it computed; the tests start the
// ranks and compare every rank's results with the same job run by this
// process alone (whose own results are checked against the fixture).
const envRankJob = "SPECULA_ENGINE_TEST_RANK_JOB"

func TestMain(m *testing.M) {
	if path := os.Getenv(envRankJob); path != "" {
		if err := rankMain(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// rankJob is what every rank (and the single process) runs.
type rankJob struct {
	Manifest string  // the target and its DFlash draft
	Prompt   []int32 // prompt ids
	Oracle   []int32 // prompt + a continuation with some tokens wrong
}

// jobResult is what one process computed.
type jobResult struct {
	Rank, Ranks                 int       // as the target reports them
	WeightBytes                 int64     // the bytes of the target's weights
	Logits                      []float32 // the prompt's logits [L·V]
	Plain, Spec, Oracle, Sample generation
}

// generation is one request's tokens and acceptance.
type generation struct {
	IDs              []int32
	Drafted          int
	Accepted         int
	PositionAccepted []int
}

func rankMain(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var job rankJob
	if err := json.Unmarshal(b, &job); err != nil {
		return err
	}
	res, err := runJob(job)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// runJob loads the manifest (sharded when this process is a rank) and
// computes the prompt's logits and four generations: plain greedy, greedy
// with the DFlash draft, greedy with an oracle drafter that is wrong at
// some positions (so rounds accept part of their drafts), and a sampled
// request without a seed.
func runJob(job rankJob) (*jobResult, error) {
	ctx := context.Background()
	e, err := engine.Load(ctx, job.Manifest, engine.Options{})
	if err != nil {
		return nil, err
	}
	res := &jobResult{}
	res.Rank, res.Ranks = e.Target().(interface{ Ranks() (int, int) }).Ranks()
	for _, a := range e.Target().(model.WeightHolder).Weights() {
		res.WeightBytes += a.NBytes()
	}
	res.Logits, err = mlx.Call(ctx, func() ([]float32, error) {
		m := e.Target()
		caches := m.NewCaches()
		defer func() {
			for _, c := range caches {
				c.Free()
			}
		}()
		hidden, _ := m.Forward(&model.Batch{InputIDs: mlx.FromInt32s(job.Prompt, 1, len(job.Prompt))}, caches)
		logits := m.Unembed(hidden)
		if err := mlx.Eval(logits); err != nil {
			return nil, err
		}
		return logits.Float32s()
	})
	if err != nil {
		return nil, err
	}
	temp := float32(0.9)
	for _, c := range []struct {
		out *generation
		req engine.Request
	}{
		{&res.Plain, engine.Request{NoDraft: true}},
		// A pinned depth, which the ranks would pick anyway (the adaptive
		// controller reads each rank's clock).
		{&res.Spec, engine.Request{FixedDepth: 7}},
		{&res.Oracle, engine.Request{Drafter: speculation.NewOracle(job.Oracle, 7), FixedDepth: 7}},
		{&res.Sample, engine.Request{Temperature: &temp}},
	} {
		c.req.IDs, c.req.MaxTokens = job.Prompt, 32
		resp, err := e.Generate(ctx, c.req, nil)
		if err != nil {
			return nil, err
		}
		*c.out = generation{IDs: resp.IDs, Drafted: resp.Stats.Drafted, Accepted: resp.Stats.Accepted, PositionAccepted: resp.Stats.PositionAccepted}
	}
	return res, nil
}

// startRanks runs job as n ranks of a ring group on 127.0.0.1 (the
// environment `specula launch` gives them, set by hand) and returns each
// rank's result.
func startRanks(t *testing.T, n int, jobPath string) []jobResult {
	t.Helper()
	dir := t.TempDir()
	hosts, err := distributed.LoopbackHostfile(n)
	if err != nil {
		t.Fatal(err)
	}
	hostfile := filepath.Join(dir, "hosts.json")
	if err := hosts.Write(hostfile); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmds := make([]*exec.Cmd, n)
	outs, errs := make([]strings.Builder, n), make([]strings.Builder, n)
	for r := range cmds {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envRankJob+"="+jobPath, "SPECULA_LOG=warn",
			distributed.EnvBackend+"=ring", distributed.EnvRank+"="+strconv.Itoa(r), distributed.EnvHostfile+"="+hostfile)
		cmd.Stdout, cmd.Stderr = &outs[r], &errs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	results := make([]jobResult, n)
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("rank %d of %d: %v\nstderr:\n%s", r, n, err, errs[r].String())
		}
		if err := json.Unmarshal([]byte(outs[r].String()), &results[r]); err != nil {
			t.Fatalf("rank %d printed %q: %v", r, outs[r].String(), err)
		}
	}
	return results
}

// shardedLogitTol bounds the difference between the sharded and the single
// process's prompt logits: the same float32 sums, added in another order
// (each rank sums its heads' and rows' share, then the ranks add up).
const shardedLogitTol = 1e-4

// The fixture target sharded over 2 and 4 ranks (4 outnumber its 2 KV heads
// and 2 delta-net key heads, which are then repeated) computes the prompt
// logits of the process alone within float32 rounding, and its greedy
// output, plain and with the replicated DFlash draft, equals the single
// process's (itself equal to transformers' greedy ids) token for token.
// Every rank reaches the same acceptance as the single process with an
// oracle drafter that is wrong at some positions, and an unseeded sampled
// request draws the same tokens on every rank (they share rank 0's seed).
func TestTensorParallelEqualsSingleProcess(t *testing.T) {
	tensorParallelEqualsSingleProcess(t, "qwen35-tiny", "dflash-tiny")
}

// The same for the MoE fixture target (4 heads, 2 KV heads, 8 experts of
// width 32, a shared expert of width 64): each rank holds its share of
// every expert and of the shared expert, the router replicated.
func TestTensorParallelMoEEqualsSingleProcess(t *testing.T) {
	tensorParallelEqualsSingleProcess(t, "qwen35moe-tiny", "dflash-moe-tiny")
}

func tensorParallelEqualsSingleProcess(t *testing.T, target, draft string) {
	ref := loadReference(t, target)
	job := rankJob{Manifest: writeManifestFor(t, target, draft, ""), Prompt: ref.PromptIDs}
	greedy := ref.GreedyIDs[:32]
	job.Oracle = slices.Concat(job.Prompt, make([]int32, 32))
	// The oracle's continuation is the single process's plain one, with
	// every fifth token wrong.
	single, err := runJob(rankJob{Manifest: job.Manifest, Prompt: job.Prompt, Oracle: job.Oracle})
	if err != nil {
		t.Fatal(err)
	}
	copy(job.Oracle[len(job.Prompt):], single.Plain.IDs)
	for j := len(job.Prompt) + 3; j < len(job.Oracle); j += 5 {
		job.Oracle[j] = (job.Oracle[j] + 1) % 512
	}
	if single, err = runJob(job); err != nil {
		t.Fatal(err)
	}

	// The single process against the fixture (transformers' outputs).
	want := refLogits(t, target, len(job.Prompt))
	if d := maxAbsDiff(single.Logits, want); d > 1e-3 {
		t.Fatalf("single process: prompt logits differ from the fixture's by %g", d)
	}
	if !slices.Equal(single.Plain.IDs, greedy) || !slices.Equal(single.Spec.IDs, greedy) || !slices.Equal(single.Oracle.IDs, greedy) {
		t.Fatalf("single process: plain %v, DFlash %v, oracle %v; want %v", single.Plain.IDs, single.Spec.IDs, single.Oracle.IDs, greedy)
	}
	if a := single.Oracle.Accepted; a == 0 || a == single.Oracle.Drafted {
		t.Fatalf("single process: the oracle had %d of %d drafts accepted; want a part", a, single.Oracle.Drafted)
	}

	path := filepath.Join(t.TempDir(), "job.json")
	b, _ := json.Marshal(job)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			ranks := startRanks(t, n, path)
			for r, got := range ranks {
				if got.Rank != r || got.Ranks != n || got.WeightBytes >= single.WeightBytes {
					t.Fatalf("rank %d: the target says it is rank %d of %d and holds %d bytes of weights (the whole model %d): it is not sharded", r, got.Rank, got.Ranks, got.WeightBytes, single.WeightBytes)
				}
				d := maxAbsDiff(got.Logits, single.Logits)
				if d > shardedLogitTol {
					t.Errorf("rank %d: prompt logits differ from the single process's by %g (tolerance %g)", r, d, shardedLogitTol)
				}
				t.Logf("rank %d of %d: %d of %d weight bytes; prompt logits within %.2g of the single process's", r, n, got.WeightBytes, single.WeightBytes, d)
				for _, c := range []struct {
					name      string
					got, want generation
				}{
					{"plain", got.Plain, single.Plain},
					{"DFlash", got.Spec, single.Spec},
					{"oracle", got.Oracle, single.Oracle},
				} {
					if !slices.Equal(c.got.IDs, greedy) {
						t.Errorf("rank %d: %s greedy output %v, want %v", r, c.name, c.got.IDs, greedy)
					}
					if c.got.Accepted != c.want.Accepted || !slices.Equal(c.got.PositionAccepted, c.want.PositionAccepted) {
						t.Errorf("rank %d: %s accepted %d %v, the single process %d %v", r, c.name, c.got.Accepted, c.got.PositionAccepted, c.want.Accepted, c.want.PositionAccepted)
					}
				}
				if !slices.Equal(got.Sample.IDs, ranks[0].Sample.IDs) || got.Sample.Accepted != ranks[0].Sample.Accepted {
					t.Errorf("rank %d sampled %v (%d accepted), rank 0 %v (%d)", r, got.Sample.IDs, got.Sample.Accepted, ranks[0].Sample.IDs, ranks[0].Sample.Accepted)
				}
			}
			t.Logf("%d ranks: oracle %d of %d drafts accepted on every rank", n, ranks[0].Oracle.Accepted, ranks[0].Oracle.Drafted)
		})
	}
}

// refLogits returns the fixture's prompt logits (transformers) for the
// first n prompt tokens, flattened.
func refLogits(t *testing.T, target string, n int) []float32 {
	t.Helper()
	v, err := mlx.Call(context.Background(), func() ([]float32, error) {
		a, err := mlx.LoadSafetensors(filepath.Join(fixtures.Dir(t, target), "reference.safetensors"))
		if err != nil {
			return nil, err
		}
		l := mlx.SliceAxis(a["logits"], 0, 0, n) // [L, V]
		if err := mlx.Eval(l); err != nil {
			return nil, err
		}
		return l.Float32s()
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}
