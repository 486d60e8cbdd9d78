package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/specula-dev/specula/distributed"
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
	out := filepath.Join(t.TempDir(), "never-written")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"launch", "--", "version"}, "-n 0: give the number of ranks, at least 1"},
		{[]string{"launch", "-n", "2"}, "no command to run"},
		{[]string{"launch", "-n", "2", "--", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"launch", "-n", "2", "--", "launch", "-n", "2", "version"}, "a rank cannot launch ranks itself"},
		{[]string{"launch", "-n", "2", "--backend", "mpi", "--", "version"}, `unknown distributed backend "mpi" (known: ring, nccl)`},
		// MLX's ring connects each rank to its neighbours: alone, a rank
		// failed with "[ring] Couldn't connect (error: 111)".
		{[]string{"launch", "-n", "1", "--backend", "ring", "--", "version"}, "-n 1: the ring backend needs at least 2 ranks"},
		// Commands that write a file or folder would have every rank write
		// the same one: one rank's rename lost ("remove out: directory
		// not empty") and the launch failed over a folder the other wrote.
		{[]string{"launch", "-n", "2", "--", "synth", "--shape", "go-tiny", "--out", out}, "specula launch: synth writes its output once; as 2 ranks each would write it: run it without launch"},
		{[]string{"launch", "-n", "2", "--", "quantize", "src", out}, "specula launch: quantize writes its output once"},
		{[]string{"launch", "-n", "2", "--", "forward", "--out", out}, "specula launch: forward writes its output once"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, stderr, code := execSpecula(t, c.args...)
			if code != exitUsage || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and %q", code, stderr, c.want)
			}
		})
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused launch wrote %s", out)
	}
}

// runOutcome is what the ranks of `specula run --json` must agree on with
// one process: the ids and the drafts' acceptance.
type runOutcome struct {
	IDs   []int32 `json:"ids"`
	Stats struct {
		Drafted  int `json:"drafted"`
		Accepted int `json:"accepted"`
	} `json:"stats"`
}

// `specula launch -n 2 -- run` shards the fixture target over two ring
// ranks on this host; with the DFlash2 draft replicated (its selector runs
// at a fixed depth, in one process or as ranks), rank 0 prints the ids the
// single process prints (transformers' greedy continuation) and the same
// acceptance.
func TestE2ELaunchTensorParallelRun(t *testing.T) {
	prompt, greedy := fixturePrompt(t)
	m := fixtureManifest(t, "dflash2-tiny")
	var results [2]runOutcome
	for i, pre := range [][]string{nil, {"launch", "-n", "2", "--"}} {
		args := append(pre, "run", "-m", m, "--ids", joinIDs(prompt), "--json")
		execSpeculaJSON(t, &results[i], args...)
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

// loopbackHostfile writes a launch hostfile of len(slots) hosts, all
// 127.0.0.1, host i running slots[i] ranks, on ports free now.
func loopbackHostfile(t *testing.T, slots ...int) string {
	t.Helper()
	n := 1
	var hosts []string
	for _, k := range slots {
		n += k
		hosts = append(hosts, `{"ips": ["127.0.0.1"], "slots": `+strconv.Itoa(k)+`}`)
	}
	port, err := distributed.FreePortRun(n)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "hosts.json")
	data := `{"port": ` + strconv.Itoa(port) + `, "hosts": [` + strings.Join(hosts, ", ") + `]}`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// launchNodes runs `specula launch --hostfile FILE --node I -- args[I]…`
// for every node at once, as separate hosts would, and returns each
// launcher's stdout, stderr and exit code.
func launchNodes(t *testing.T, hostfile string, args ...[]string) (stdout, stderr []string, codes []int) {
	t.Helper()
	cmds := make([]*exec.Cmd, len(args))
	outs, errs := make([]bytes.Buffer, len(args)), make([]bytes.Buffer, len(args))
	for node, a := range args {
		cmds[node] = exec.Command(specula(t), append([]string{"launch", "--hostfile", hostfile, "--node", strconv.Itoa(node), "--"}, a...)...)
		cmds[node].Env = append(os.Environ(), "SPECULA_LOG=warn")
		cmds[node].Stdout, cmds[node].Stderr = &outs[node], &errs[node]
		if err := cmds[node].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for node, cmd := range cmds {
		code := 0
		if err := cmd.Wait(); err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatal(err)
			}
			code = ee.ExitCode()
		}
		stdout, stderr, codes = append(stdout, outs[node].String()), append(stderr, errs[node].String()), append(codes, code)
	}
	return stdout, stderr, codes
}

// Two launchers of one hostfile whose two hosts are this one (1 rank each,
// then 2) run the fixture target sharded over their ranks through the ring
// backend; node 0 prints what the single process prints (the ids and the
// drafts' acceptance), node 1 prints nothing.
func TestE2ELaunchAcrossTwoHosts(t *testing.T) {
	prompt, greedy := fixturePrompt(t)
	m := fixtureManifest(t, "dflash2-tiny")
	run := []string{"run", "-m", m, "--ids", joinIDs(prompt), "--json"}
	var single runOutcome
	execSpeculaJSON(t, &single, run...)
	if !slices.Equal(single.IDs, greedy) || single.Stats.Drafted == 0 {
		t.Fatalf("single process: ids %v (reference %v), %d drafted", single.IDs, greedy, single.Stats.Drafted)
	}
	for _, slots := range []int{1, 2} {
		t.Run(strconv.Itoa(slots)+" ranks each", func(t *testing.T) {
			outs, errs, codes := launchNodes(t, loopbackHostfile(t, slots, slots), run, run)
			for node, code := range codes {
				if code != 0 {
					t.Fatalf("node %d: exit %d\n%s", node, code, errs[node])
				}
			}
			var sharded runOutcome
			if err := json.Unmarshal([]byte(outs[0]), &sharded); err != nil {
				t.Fatalf("node 0 printed %q: %v", outs[0], err)
			}
			if !slices.Equal(sharded.IDs, single.IDs) || sharded.Stats != single.Stats {
				t.Fatalf("%d ranks over two launchers: ids %v, %+v; the single process %v, %+v", 2*slots, sharded.IDs, sharded.Stats, single.IDs, single.Stats)
			}
			if outs[1] != "" || errs[1] != "" {
				t.Errorf("node 1 printed %q and %q; want nothing (rank 0's output is node 0's)", outs[1], errs[1])
			}
		})
	}
}

// A rank that fails on node 1 ends node 0's ranks: node 1 names its rank,
// node 0 names node 1 and the rank's own error.
func TestE2ELaunchAcrossHostsReportsAFailedNode(t *testing.T) {
	prompt, _ := fixturePrompt(t)
	good := []string{"run", "-m", fixtureManifest(t, "dflash-tiny"), "--ids", joinIDs(prompt)}
	bad := []string{"run", "-m", "/nonexistent/model.toml", "hi"}
	_, errs, codes := launchNodes(t, loopbackHostfile(t, 1, 1), good, bad)
	if codes[0] != 1 || codes[1] != 1 {
		t.Fatalf("exit codes %v, want 1 and 1; stderr:\n%s\n%s", codes, errs[0], errs[1])
	}
	if !regexp.MustCompile(`specula launch: rank 1 of 2 on node 1 \(127\.0\.0\.1\) \(pid \d+\) exited with status 1`).MatchString(errs[1]) {
		t.Errorf("node 1 does not name its failed rank:\n%s", errs[1])
	}
	for _, want := range []string{"specula launch: node 1 (127.0.0.1) failed: rank 1 of 2 on node 1", "/nonexistent/model.toml"} {
		if !strings.Contains(errs[0], want) {
			t.Errorf("node 0's stderr lacks %q:\n%s", want, errs[0])
		}
	}
}

// A node whose peer never starts gives up after --start-timeout, naming
// the node it waited for and how to start it.
func TestE2ELaunchPeerNeverStarts(t *testing.T) {
	hosts := loopbackHostfile(t, 1, 1)
	_, stderr, code := execSpecula(t, "launch", "--hostfile", hosts, "--node", "0", "--start-timeout", "1s", "--", "version")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"specula launch: node 0 waited 1s for node 1 (127.0.0.1): no launcher connected to 127.0.0.1:", "specula launch --hostfile " + hosts + " --node 1 -- …` there"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestE2ELaunchHostfileUsageErrors(t *testing.T) {
	hosts := loopbackHostfile(t, 1, 2)
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"hosts": [{"ips": ["127.0.0.1"], "slots": 0}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no node", []string{"--hostfile", hosts}, "--hostfile " + hosts + " needs --node I: which of its 2 hosts this is"},
		{"unknown node", []string{"--hostfile", hosts, "--node", "2"}, "--node 2: hostfile " + hosts + " lists 2 hosts, nodes 0 to 1"},
		{"-n conflicting", []string{"--hostfile", hosts, "--node", "0", "-n", "2"}, "-n 2, but hostfile " + hosts + " gives 3 ranks"},
		{"no hostfile", []string{"--node", "1", "-n", "2"}, "--node 1 needs --hostfile"},
		{"zero slots", []string{"--hostfile", bad, "--node", "0"}, "hostfile " + bad + ": host 0: \"slots\": 0: give the number of ranks this host runs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := execSpecula(t, append(append([]string{"launch"}, c.args...), "--", "version")...)
			if code != exitUsage || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and %q", code, stderr, c.want)
			}
		})
	}
}
