package distributed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/specula-dev/specula/distributed"
	"github.com/specula-dev/specula/mlx"
)

// The test binary doubles as a rank: with envChild set, TestMain runs the
// named child function instead of the tests and exits.
const envChild = "SPECULA_DISTRIBUTED_TEST_CHILD"

var children = map[string]func() error{
	"collectives": collectivesChild,
	"echo":        echoChild,
	"env":         recordEnvChild,
	"fail":        failChild,
}

func TestMain(m *testing.M) {
	if name := os.Getenv(envChild); name != "" {
		fn, ok := children[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child %q\n", name)
			os.Exit(2)
		}
		if err := fn(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// collectiveResult is what a rank of collectivesChild prints.
type collectiveResult struct {
	Rank, Size int
	Sum        []float32 // all_sum of [r+1, 2(r+1), 3(r+1)] (float32)
	SumInt     []int32   // all_sum of [r, -r] (int32)
	Gather     []float32 // all_gather of [[10r, 10r+1]] ([1, 2] float32)
	GatherDims []int
}

// collectivesChild joins the group from the environment, runs the
// collectives on rank-dependent inputs and prints what came back as JSON.
func collectivesChild() error {
	return mlx.Do(context.Background(), func() error {
		g, err := distributed.Join()
		if err != nil {
			return err
		}
		r := float32(g.Rank())
		sum := mlx.AllSum(mlx.FromFloat32s([]float32{r + 1, 2 * (r + 1), 3 * (r + 1)}, 3), g)
		sumInt := mlx.AllSum(mlx.FromInt32s([]int32{int32(g.Rank()), -int32(g.Rank())}, 2), g)
		gather := mlx.AllGather(mlx.FromFloat32s([]float32{10 * r, 10*r + 1}, 1, 2), g)
		if err := mlx.Eval(sum, sumInt, gather); err != nil {
			return err
		}
		out := collectiveResult{Rank: g.Rank(), Size: g.Size(), GatherDims: gather.Shape()}
		if out.Sum, err = sum.Float32s(); err != nil {
			return err
		}
		if out.SumInt, err = sumInt.Int32s(); err != nil {
			return err
		}
		if out.Gather, err = gather.Float32s(); err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(out)
	})
}

// TestRingCollectives starts n processes of this test binary as the ranks of
// a ring group on 127.0.0.1 (MLX_RANK, MLX_HOSTFILE set by hand, no
// launcher) and checks all_sum and all_gather against sums worked out by
// hand.
func TestRingCollectives(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(strconv.Itoa(n)+" ranks", func(t *testing.T) {
			hosts, err := distributed.LoopbackHostfile(n)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "hosts.json")
			if err := hosts.Write(path); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmds := make([]*exec.Cmd, n)
			outs := make([]*strings.Builder, n)
			errs := make([]*strings.Builder, n)
			for r := range cmds {
				cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), envChild+"=collectives",
					distributed.EnvBackend+"=ring",
					distributed.EnvRank+"="+strconv.Itoa(r),
					distributed.EnvHostfile+"="+path)
				outs[r], errs[r] = &strings.Builder{}, &strings.Builder{}
				cmd.Stdout, cmd.Stderr = outs[r], errs[r]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r] = cmd
			}
			for r, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Fatalf("rank %d: %v\nstderr:\n%s", r, err, errs[r])
				}
			}

			// By hand: Σ_r (r+1) = n(n+1)/2; Σ_r r = n(n−1)/2.
			s := float32(n * (n + 1) / 2)
			wantSum := []float32{s, 2 * s, 3 * s}
			wantInt := []int32{int32(n * (n - 1) / 2), -int32(n * (n - 1) / 2)}
			var wantGather []float32
			for r := range n {
				wantGather = append(wantGather, float32(10*r), float32(10*r+1))
			}
			for r := range n {
				var got collectiveResult
				if err := json.Unmarshal([]byte(outs[r].String()), &got); err != nil {
					t.Fatalf("rank %d printed %q: %v", r, outs[r], err)
				}
				if got.Rank != r || got.Size != n {
					t.Errorf("rank %d: group says rank %d of %d", r, got.Rank, got.Size)
				}
				if !slices.Equal(got.Sum, wantSum) {
					t.Errorf("rank %d: all_sum float32 = %v, want %v", r, got.Sum, wantSum)
				}
				if !slices.Equal(got.SumInt, wantInt) {
					t.Errorf("rank %d: all_sum int32 = %v, want %v", r, got.SumInt, wantInt)
				}
				if !slices.Equal(got.Gather, wantGather) || !slices.Equal(got.GatherDims, []int{n, 2}) {
					t.Errorf("rank %d: all_gather = %v %v, want %v [%d 2]", r, got.Gather, got.GatherDims, wantGather, n)
				}
			}
		})
	}
}

// TestJoinRefusesAMissingEnvironment: a process not started as a rank, or
// with a broken hostfile, is told which variable is wrong.
func TestJoinRefusesAMissingEnvironment(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`[["127.0.0.1:1"], []]`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"not a rank", map[string]string{distributed.EnvBackend: ""}, "SPECULA_DISTRIBUTED is not set"},
		{"unknown backend", map[string]string{distributed.EnvBackend: "carrier-pigeon"}, `unknown distributed backend "carrier-pigeon" (known: ring, nccl)`},
		{"no rank", map[string]string{distributed.EnvBackend: "ring", distributed.EnvRank: "x"}, `MLX_RANK="x" is not a rank`},
		{"no hostfile", map[string]string{distributed.EnvBackend: "ring", distributed.EnvRank: "0", distributed.EnvHostfile: ""}, "MLX_HOSTFILE: no hostfile given"},
		{"ragged hostfile", map[string]string{distributed.EnvBackend: "ring", distributed.EnvRank: "0", distributed.EnvHostfile: bad}, "rank 1 has 0 addresses"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			err := mlx.Do(context.Background(), func() error {
				_, err := distributed.Join()
				return err
			})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Join: %v, want an error containing %q", err, c.want)
			}
		})
	}
}
