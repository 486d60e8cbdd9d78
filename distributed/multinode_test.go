package distributed_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/specula-dev/specula/distributed"
)

// rankEnv is what recordEnvChild records of a rank's environment.
type rankEnv struct {
	Rank, WorldSize, Backend string
	Hostfile                 distributed.Hostfile
	NCCLHost, NCCLPort       string
	GPU, NVLS, Extra         string
}

// recordEnvChild writes its rank's environment to $ENV_OUT/rank-<MLX_RANK>.json.
func recordEnvChild() error {
	e := rankEnv{
		Rank: os.Getenv(distributed.EnvRank), WorldSize: os.Getenv(distributed.EnvWorldSize),
		Backend: os.Getenv(distributed.EnvBackend), NCCLHost: os.Getenv(distributed.EnvNCCLHost),
		NCCLPort: os.Getenv(distributed.EnvNCCLPort), GPU: os.Getenv("CUDA_VISIBLE_DEVICES"),
		NVLS: os.Getenv("NCCL_NVLS_ENABLE"), Extra: os.Getenv("EXTRA"),
	}
	if path := os.Getenv(distributed.EnvHostfile); path != "" {
		h, err := distributed.ReadHostfile(path)
		if err != nil {
			return err
		}
		e.Hostfile = h
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(os.Getenv("ENV_OUT"), "rank-"+e.Rank+".json"), b, 0o644)
}

// loopbackCluster is a hostfile of hosts on 127.0.0.1 with the given slots,
// on ports free now.
func loopbackCluster(t *testing.T, slots ...int) *distributed.Cluster {
	t.Helper()
	n := 1
	for _, s := range slots {
		n += s
	}
	port, err := distributed.FreePortRun(n)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, s := range slots {
		hosts = append(hosts, `{"ips": ["127.0.0.1"], "slots": `+strconv.Itoa(s)+`}`)
	}
	data := `{"port": ` + strconv.Itoa(port) + `, "envs": ["EXTRA=from the hostfile"], "hosts": [` + strings.Join(hosts, ", ") + `]}`
	c, err := distributed.ParseCluster("hosts.json", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runNodes runs one launcher per node of c, as separate hosts would (each
// meets the others, runs its ranks with the others' failures as Stop, and
// finishes), and returns each node's Run and Finish errors.
func runNodes(t *testing.T, c *distributed.Cluster, backend string, mk func(node int) *distributed.Launch) (runErrs, finishErrs []error) {
	t.Helper()
	runErrs, finishErrs = make([]error, len(c.Hosts)), make([]error, len(c.Hosts))
	var wg sync.WaitGroup
	for node := range c.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			peers, err := distributed.Meet(context.Background(), c, node, backend, time.Minute)
			if err != nil {
				runErrs[node] = err
				return
			}
			l := mk(node)
			l.Cluster, l.Node, l.Backend, l.N, l.Stop = c, node, backend, c.Hosts[node].Slots, peers.Failed()
			runErrs[node] = l.Run(context.Background())
			finishErrs[node] = peers.Finish(runErrs[node], time.Minute)
		}()
	}
	wg.Wait()
	return runErrs, finishErrs
}

// Two nodes (2 ranks and 1): each starts its own ranks, numbered after the
// previous node's, with the whole group's size and, for ring, the same
// hostfile of every rank's derived address; for NCCL, node 0's address and
// one GPU per rank counted on its own host. Expected values by hand from
// the hostfile's port.
func TestLaunchAcrossNodesSetsEveryRanksEnvironment(t *testing.T) {
	for _, backend := range distributed.Backends {
		t.Run(backend, func(t *testing.T) {
			c := loopbackCluster(t, 2, 1)
			out := t.TempDir()
			runErrs, finishErrs := runNodes(t, c, backend, func(int) *distributed.Launch {
				l := launch(0, "env", "ENV_OUT="+out, "CUDA_VISIBLE_DEVICES=", "NCCL_NVLS_ENABLE=")
				return l
			})
			for node := range c.Hosts {
				if runErrs[node] != nil || finishErrs[node] != nil {
					t.Fatalf("node %d: run %v, finish %v", node, runErrs[node], finishErrs[node])
				}
			}
			p := c.Port
			ring := distributed.Hostfile{{"127.0.0.1:" + strconv.Itoa(p+1)}, {"127.0.0.1:" + strconv.Itoa(p+2)}, {"127.0.0.1:" + strconv.Itoa(p+3)}}
			for rank, gpu := range []string{"0", "1", "0"} {
				b, err := os.ReadFile(filepath.Join(out, "rank-"+strconv.Itoa(rank)+".json"))
				if err != nil {
					t.Fatalf("rank %d did not run: %v", rank, err)
				}
				var got rankEnv
				if err := json.Unmarshal(b, &got); err != nil {
					t.Fatal(err)
				}
				want := rankEnv{Rank: strconv.Itoa(rank), WorldSize: "3", Backend: backend, Extra: "from the hostfile"}
				if backend == "ring" {
					want.Hostfile = ring
				} else {
					want.NCCLHost, want.NCCLPort, want.GPU, want.NVLS = "127.0.0.1", strconv.Itoa(p+1), gpu, "0"
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("rank %d's environment:\n got %+v\nwant %+v", rank, got, want)
				}
			}
		})
	}
}

// A rank that fails on node 1 ends node 0's ranks too (they would wait a
// minute): node 0 reports node 1's failure, naming the rank, how it ended
// and what it last wrote.
func TestLaunchAcrossNodesEndsEveryNodeWhenARankDies(t *testing.T) {
	c := loopbackCluster(t, 1, 2)
	start := time.Now()
	runErrs, finishErrs := runNodes(t, c, "ring", func(int) *distributed.Launch {
		return launch(0, "fail", "FAIL_RANK=2")
	})
	took := time.Since(start)
	var re *distributed.RankError
	if !errors.As(runErrs[1], &re) || re.Rank != 2 || re.N != 3 {
		t.Fatalf("node 1: %v, want rank 2 of 3 failing", runErrs[1])
	}
	for _, want := range []string{"rank 2 of 3 on node 1 (127.0.0.1) (pid ", "exited with status 3", "rank 2 gives up: the fixture told it to"} {
		if !strings.Contains(runErrs[1].Error(), want) {
			t.Errorf("node 1's error %q lacks %q", runErrs[1], want)
		}
	}
	// Node 0 was stopped by node 1's failure, and its ranks' end agrees.
	for _, err := range []error{runErrs[0], finishErrs[0]} {
		if err == nil || !strings.Contains(err.Error(), "node 1 (127.0.0.1) failed: rank 2 of 3 on node 1") {
			t.Errorf("node 0: %v, want node 1's failure", err)
		}
	}
	if took > 30*time.Second {
		t.Errorf("took %v: node 0's ranks were not ended", took)
	}
}

// A node whose peer never starts ends with an error naming the node it
// waited for and where, after the start timeout; node 0 the same.
func TestMeetNamesAPeerThatNeverStarts(t *testing.T) {
	// meet runs node's launcher alone on c and checks its error says want.
	meet := func(c *distributed.Cluster, node int, want ...string) {
		t.Helper()
		_, err := distributed.Meet(context.Background(), c, node, "ring", 300*time.Millisecond)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("node %d: Meet: %v, want %q", node, err, w)
			}
		}
	}
	c := loopbackCluster(t, 1, 1)
	meet(c, 0, "node 0 waited 300ms for node 1 (127.0.0.1): no launcher connected to "+c.MeetAddr(), "--node 1 -- …` there")

	// Node 1 must find nothing at node 0's port for the whole wait: the
	// port is held bound, so that no test running beside this one can
	// start listening there (once one did, and node 1's dial was answered,
	// then reset).
	for try := 0; !reservePort(t, c.Port); try++ {
		if try == 10 {
			t.Fatalf("ten free ports in a row were taken before they could be held (last %d)", c.Port)
		}
		c = loopbackCluster(t, 1, 1)
	}
	addr := c.MeetAddr()
	if l, err := net.Listen("tcp4", addr); err == nil {
		l.Close()
		t.Fatalf("%s is open to listeners though held bound", addr)
	}
	meet(c, 1, "node 1 waited 300ms for node 0 (127.0.0.1): its launcher never answered at "+addr, "--node 0 -- …` there")
}

// Launchers given different backends (or files) refuse to start together,
// and both say why.
func TestMeetRefusesADifferentGroup(t *testing.T) {
	c := loopbackCluster(t, 1, 1)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for node, backend := range []string{"ring", "nccl"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[node] = distributed.Meet(context.Background(), c, node, backend, time.Minute)
		}()
	}
	wg.Wait()
	for node, err := range errs {
		if want := "node 1's hostfile or --backend differs from node 0's"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("node %d: %v, want %q", node, err, want)
		}
	}
}
