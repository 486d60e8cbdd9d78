package distributed

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Launch describes N ranks of one command on this host: the whole group,
// or, with Cluster set, node Node's share of a group spread over several
// hosts.
type Launch struct {
	N       int      // number of ranks on this host, at least 1 (Cluster.Hosts[Node].Slots with a Cluster)
	Backend string   // "ring" or "nccl"
	Path    string   // the program every rank runs
	Args    []string // its arguments (without the program)
	Env     []string // the environment the ranks start from (os.Environ() when nil)

	// Stdout and Stderr receive rank 0's output (discarded when nil). The
	// other ranks' standard output is discarded: every rank computes the
	// same result. The last lines of the standard error of every rank not
	// shown (all but rank 0 when Stderr is set) are kept for the report of
	// a rank that fails.
	Stdout, Stderr io.Writer

	// Signals, when set, are forwarded to every rank (SIGINT, SIGTERM).
	Signals <-chan os.Signal

	// Cluster, when set, is the group's hosts, of which this launcher
	// starts those of host Node: ranks FirstRank(Node) on, with the
	// addresses and ports the Cluster derives. Only rank 0 (on node 0)
	// shows its output.
	Cluster *Cluster
	Node    int

	// Stop, when it delivers, ends the ranks as a failing rank does, and
	// Run returns what it delivered unless a rank of this host failed
	// first (another node failed: Peers.Failed).
	Stop <-chan error

	// Grace is how long the ranks have to end after SIGTERM before they are
	// killed, when one rank failed or ctx was cancelled (DefaultGrace when
	// zero).
	Grace time.Duration
}

// DefaultGrace is how long ranks have to end after SIGTERM before SIGKILL:
// long enough for a rank to end its plugins, short enough that a wedged
// collective does not hold the launcher.
const DefaultGrace = 5 * time.Second

// stderrTail is how much of a rank's standard error a RankError keeps.
const stderrTail = 4 << 10

// RankError reports the rank that ended the launch: its exit status or the
// signal that killed it, and the end of its standard error.
type RankError struct {
	Rank, N int    // the rank in the group, and the group's size
	Node    string // the host it ran on, when the group spans several (Cluster.NodeName)
	PID     int
	State   *os.ProcessState // nil when the rank could not start
	Err     error            // the start error, when State is nil
	Stderr  string           // the last lines of its standard error
}

func (e *RankError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d of %d", e.Rank, e.N)
	if e.Node != "" {
		fmt.Fprintf(&b, " on %s", e.Node)
	}
	if e.State == nil {
		fmt.Fprintf(&b, " could not start: %v", e.Err)
		return b.String()
	}
	fmt.Fprintf(&b, " (pid %d) %s", e.PID, describeExit(e.State))
	if s := strings.TrimSpace(e.Stderr); s != "" {
		fmt.Fprintf(&b, "; the end of its standard error:\n  %s", strings.ReplaceAll(s, "\n", "\n  "))
	}
	return b.String()
}

// ExitCode is the code the launcher should exit with: the rank's own, or
// 128 + the signal that killed it, as a shell reports it (1 when it did not
// start).
func (e *RankError) ExitCode() int {
	if e.State == nil {
		return 1
	}
	if ws, ok := e.State.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return e.State.ExitCode()
}

// describeExit says how a process ended: "exited with status 3", "was
// killed by signal 9 (killed)".
func describeExit(s *os.ProcessState) string {
	if ws, ok := s.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		d := fmt.Sprintf("was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
		if ws.CoreDump() {
			d += ", core dumped"
		}
		return d
	}
	return fmt.Sprintf("exited with status %d", s.ExitCode())
}

// rank is one started process.
type rank struct {
	id     int
	cmd    *exec.Cmd
	tail   *tailBuffer
	exited bool // its exit was received (set by Run's loop only)
}

// exit is a rank's end.
type exit struct {
	r   *rank
	err error // from Wait
}

// Run starts the ranks, waits for all of them and returns nil when every
// rank exited with status 0. When one fails (a non-zero status, a signal,
// a start error), the others get SIGTERM, then SIGKILL after Grace, and Run
// returns a *RankError for the first rank that failed. When ctx ends first,
// the ranks are ended the same way and Run returns ctx's error. Signals
// received on l.Signals are forwarded to every rank; a rank that then exits
// with a failure is reported as usual.
func (l *Launch) Run(ctx context.Context) error {
	if l.N < 1 {
		return fmt.Errorf("distributed: %d ranks: want at least 1", l.N)
	}
	first, size, node := 0, l.N, ""
	if c := l.Cluster; c != nil {
		if err := c.CheckNode(l.Node); err != nil {
			return err
		}
		if l.N != c.Hosts[l.Node].Slots {
			return fmt.Errorf("distributed: %d ranks on node %d, but %s gives it %d slots", l.N, l.Node, c.Path, c.Hosts[l.Node].Slots)
		}
		first, size = c.FirstRank(l.Node), c.Ranks()
		if len(c.Hosts) > 1 {
			node = c.NodeName(l.Node)
		}
	}
	if err := CheckBackend(l.Backend); err != nil {
		return fmt.Errorf("distributed: %w", err)
	}
	grace := l.Grace
	if grace == 0 {
		grace = DefaultGrace
	}
	envs, cleanup, err := l.rankEnvs(first, size)
	if err != nil {
		return err
	}
	defer cleanup()

	exits := make(chan exit, l.N)
	var ranks []*rank
	var startErr *RankError
	for i := range l.N {
		r := &rank{id: first + i, tail: &tailBuffer{max: stderrTail}}
		r.cmd = exec.Command(l.Path, l.Args...)
		r.cmd.Env = envs[i]
		// A process group per rank: a terminal's Ctrl-C reaches the
		// launcher alone, which forwards it once, and ending a rank ends
		// what it started (a compiler MLX runs, plugins).
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		r.cmd.Stderr = r.tail
		if r.id == 0 {
			r.cmd.Stdout = orDiscard(l.Stdout)
			if l.Stderr != nil {
				// Shown as it comes: the report need not repeat it.
				r.cmd.Stderr = l.Stderr
			}
		}
		if err := r.cmd.Start(); err != nil {
			startErr = &RankError{Rank: r.id, N: size, Node: node, Err: err}
			break
		}
		ranks = append(ranks, r)
		go func() { exits <- exit{r, r.cmd.Wait()} }()
	}

	var failed *RankError
	if startErr != nil {
		failed = startErr
	}
	var stopped error       // what Stop delivered, when it ended the ranks
	ending := failed != nil // SIGTERM sent to every rank
	var killAt <-chan time.Time
	endAll := func() {
		if ending {
			return
		}
		ending = true
		signalAll(ranks, syscall.SIGTERM)
		killAt = time.After(grace)
	}
	if ending {
		signalAll(ranks, syscall.SIGTERM)
		killAt = time.After(grace)
	}
	done := ctx.Done()
	for left := len(ranks); left > 0; {
		select {
		case e := <-exits:
			left--
			e.r.exited = true
			// A rank that fails after the launcher began ending them
			// (ctx ended) failed because of it.
			if e.err != nil && failed == nil && !ending {
				failed = &RankError{Rank: e.r.id, N: size, Node: node, PID: e.r.cmd.Process.Pid, State: e.r.cmd.ProcessState, Stderr: e.r.tail.String()}
				if _, ok := e.err.(*exec.ExitError); !ok {
					failed.State, failed.Err = nil, e.err
				}
			}
			if e.err != nil {
				endAll()
			}
		case err := <-l.Stop:
			if stopped == nil && failed == nil && !ending {
				stopped = err
			}
			endAll()
		case sig := <-l.Signals:
			if s, ok := sig.(syscall.Signal); ok {
				signalAll(ranks, s)
			}
		case <-done:
			done = nil
			endAll()
		case <-killAt:
			signalAll(ranks, syscall.SIGKILL)
		}
	}
	if failed != nil {
		return failed
	}
	if stopped != nil {
		return stopped
	}
	return ctx.Err()
}

// signalAll sends sig to the process group of every rank still running.
func signalAll(ranks []*rank, sig syscall.Signal) {
	for _, r := range ranks {
		if !r.exited {
			_ = syscall.Kill(-r.cmd.Process.Pid, sig)
		}
	}
}

// rankEnvs returns the environment of each rank of this host, ranks
// first … first+l.N−1 of size, with what cleanup removes afterwards (the
// ring hostfile).
func (l *Launch) rankEnvs(first, size int) ([][]string, func(), error) {
	base := l.Env
	if base == nil {
		base = os.Environ()
	}
	common := []string{EnvBackend + "=" + l.Backend, EnvWorldSize + "=" + strconv.Itoa(size)}
	var extra []string
	if l.Cluster != nil {
		// The hostfile's "envs" first: the launcher's own variables win.
		extra = l.Cluster.Envs
	}
	var perRank func(i int) []string
	cleanup := func() {}
	switch l.Backend {
	case "ring":
		var hosts Hostfile
		var err error
		if l.Cluster != nil {
			// Every node writes the same file: the ports are derived.
			hosts = l.Cluster.RingHostfile()
		} else if hosts, err = LoopbackHostfile(l.N); err != nil {
			return nil, nil, err
		}
		dir, err := os.MkdirTemp("", "specula-launch-")
		if err != nil {
			return nil, nil, err
		}
		cleanup = func() { os.RemoveAll(dir) }
		path := filepath.Join(dir, "hostfile.json")
		if err := hosts.Write(path); err != nil {
			cleanup()
			return nil, nil, err
		}
		common = append(common, EnvHostfile+"="+path)
		perRank = func(int) []string { return nil }
	case "nccl":
		host, port := "127.0.0.1", 0
		if l.Cluster != nil {
			host, port = l.Cluster.NCCLAddr()
		} else {
			var err error
			if port, err = freePort(); err != nil {
				return nil, nil, err
			}
		}
		common = append(common, EnvNCCLHost+"="+host, EnvNCCLPort+"="+strconv.Itoa(port))
		if getenv(base, "NCCL_NVLS_ENABLE") == "" {
			// NVLink multicast (NVLS) is left off unless asked for: the
			// shared H200 hosts this was written for need it off.
			common = append(common, "NCCL_NVLS_ENABLE=0")
		}
		gpus, err := rankGPUs(getenv(base, "CUDA_VISIBLE_DEVICES"), l.N)
		if err != nil {
			return nil, nil, err
		}
		// MLX computes on GPU 0 of what it sees, and its NCCL layer picks
		// GPU rank % count: each rank sees exactly its own GPU, chosen by
		// its rank on this host.
		perRank = func(i int) []string { return []string{"CUDA_VISIBLE_DEVICES=" + gpus[i]} }
	}
	envs := make([][]string, l.N)
	for i := range envs {
		set := append(append(append(slices.Clip(extra), EnvRank+"="+strconv.Itoa(first+i)), common...), perRank(i)...)
		envs[i] = withEnv(base, set)
	}
	return envs, cleanup, nil
}

// rankGPUs assigns one GPU to each of n ranks: the first n of visible (a
// CUDA_VISIBLE_DEVICES list) or, when it is empty, GPUs 0 … n−1.
func rankGPUs(visible string, n int) ([]string, error) {
	if visible == "" {
		out := make([]string, n)
		for i := range out {
			out[i] = strconv.Itoa(i)
		}
		return out, nil
	}
	ids := strings.Split(visible, ",")
	if len(ids) < n {
		return nil, fmt.Errorf("distributed: %d ranks need a GPU each but CUDA_VISIBLE_DEVICES=%s lists %d", n, visible, len(ids))
	}
	return ids[:n], nil
}

// withEnv returns base with the KEY=value pairs of set replacing any
// earlier value of the same keys.
func withEnv(base, set []string) []string {
	keys := map[string]bool{}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	out := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !keys[k] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

func getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, _ := strings.Cut(env[i], "="); k == key {
			return v
		}
	}
	return ""
}

func freePort() (int, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("distributed: choosing a loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// tailBuffer keeps the last max bytes written to it, cut at a line start
// when it can be.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) == t.max {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
