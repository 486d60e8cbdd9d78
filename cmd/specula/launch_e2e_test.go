package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// launch -n 2 runs the command twice and shows rank 0's output once.
func TestE2ELaunchShowsRankZero(t *testing.T) {
	stdout, stderr, code := execSpecula(t, "launch", "-n", "2", "--", "version")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "specula ") {
		t.Fatalf("stdout = %q, want rank 0's one version line", stdout)
	}
}

// A command that fails on its ranks ends the launch with the rank's status
// and a line naming the rank and how it ended.
func TestE2ELaunchReportsAFailedRank(t *testing.T) {
	_, stderr, code := execSpecula(t, "launch", "-n", "2", "--", "run", "-m", "/nonexistent/model.toml", "hi")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	if !regexp.MustCompile(`specula launch: rank [01] of 2 \(pid \d+\) exited with status 1`).MatchString(stderr) {
		t.Errorf("stderr does not name the failed rank and its status:\n%s", stderr)
	}
	if !strings.Contains(stderr, "/nonexistent/model.toml") {
		t.Errorf("stderr lacks the rank's own error:\n%s", stderr)
	}
}

func TestE2ELaunchUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"launch", "--", "version"}, "-n 0: give the number of ranks, at least 1"},
		{[]string{"launch", "-n", "2"}, "no command to run"},
		{[]string{"launch", "-n", "2", "--", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"launch", "-n", "2", "--", "launch", "-n", "2", "version"}, "a rank cannot launch ranks itself"},
		{[]string{"launch", "-n", "2", "--backend", "mpi", "--", "version"}, `unknown distributed backend "mpi" (known: ring, nccl)`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, stderr, code := execSpecula(t, c.args...)
			if code != exitUsage || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and %q", code, stderr, c.want)
			}
		})
	}
}

// `specula launch -n 2 -- run` shards the fixture target over two ring
// ranks on this host; with the DFlash2 draft replicated (its selector runs
// at a fixed depth, in one process or as ranks), rank 0 prints the ids the
// single process prints (transformers' greedy continuation) and the same
// acceptance.
func TestE2ELaunchTensorParallelRun(t *testing.T) {
	prompt, greedy := fixturePrompt(t)
	m := fixtureManifest(t, "dflash2-tiny")
	type result struct {
		IDs   []int32 `json:"ids"`
		Stats struct {
			Drafted  int `json:"drafted"`
			Accepted int `json:"accepted"`
		} `json:"stats"`
	}
	var results [2]result
	for i, pre := range [][]string{nil, {"launch", "-n", "2", "--"}} {
		args := append(pre, "run", "-m", m, "--ids", joinIDs(prompt), "--json")
		stdout, stderr, code := execSpecula(t, args...)
		if code != 0 {
			t.Fatalf("specula %v: exit %d\n%s", args, code, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &results[i]); err != nil {
			t.Fatalf("specula %v printed %q: %v", args, stdout, err)
		}
	}
	single, sharded := results[0], results[1]
	if !slices.Equal(single.IDs, greedy) || !slices.Equal(sharded.IDs, greedy) {
		t.Fatalf("single process %v\n2 ranks %v\nreference %v", single.IDs, sharded.IDs, greedy)
	}
	if sharded.Stats != single.Stats || sharded.Stats.Drafted == 0 {
		t.Fatalf("2 ranks drafted %d and accepted %d, the single process %d and %d", sharded.Stats.Drafted, sharded.Stats.Accepted, single.Stats.Drafted, single.Stats.Accepted)
	}
}

// What cannot run as ranks says so, naming the rank and the cause: a rank
// count the model's heads do not divide, a backend this MLX lacks, the
// server.
func TestE2ELaunchTensorParallelErrors(t *testing.T) {
	prompt, _ := fixturePrompt(t)
	m := fixtureManifest(t, "dflash-tiny")
	cases := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"launch", "-n", "3", "--", "run", "-m", m, "--ids", joinIDs(prompt)}, 1,
			[]string{"rank ", " of 3: sharding target Qwen3_5ForCausalLM", "num_attention_heads = 4 is not divisible by 3 ranks"}},
		{[]string{"launch", "-n", "2", "--backend", "nccl", "--", "run", "-m", m, "--ids", joinIDs(prompt)}, 1,
			[]string{"distributed: rank ", `the "nccl" distributed backend is not available`}},
		{[]string{"launch", "-n", "2", "--", "serve", m}, exitUsage,
			[]string{"the server does not run as ranks of `specula launch` yet"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args[:4], " "), func(t *testing.T) {
			_, stderr, code := execSpecula(t, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, stderr)
			}
			if !regexp.MustCompile(`specula launch: rank \d of \d \(pid \d+\) exited with status \d`).MatchString(stderr) {
				t.Errorf("stderr does not name the failed rank:\n%s", stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}
