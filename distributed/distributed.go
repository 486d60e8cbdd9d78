// Package distributed starts specula's processes as the ranks of one MLX
// distributed group (spec/distributed.md) and joins a rank to its group.
//
// A launcher (Launch, behind `specula launch`) starts N copies of a command
// on this host, each with the environment its backend reads: for ring (TCP,
// the CPU backend) MLX_RANK and MLX_HOSTFILE, a JSON file listing one
// loopback address per rank; for NCCL (GPUs) MLX_RANK, MLX_WORLD_SIZE,
// NCCL_HOST_IP, NCCL_PORT and one GPU per rank through CUDA_VISIBLE_DEVICES.
// It also sets SPECULA_DISTRIBUTED to the backend's name, which is how a
// rank knows it is one (Joined) and which backend Join starts.
//
// A group can span several hosts (Cluster, read from a launch hostfile):
// a launcher runs on each, starting that host's ranks with their global
// ranks and the addresses the file derives, after meeting the others'
// launchers (Meet), which then end every host's ranks when one fails.
//
// Sharding a model over the group lives in the architectures (arch/qwen35).
package distributed

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/specula-dev/specula/mlx"
)

// Environment variables a launched rank reads.
const (
	// EnvBackend names the backend a rank joins ("ring" or "nccl"); set by
	// the launcher on every rank, absent in a process started alone.
	EnvBackend = "SPECULA_DISTRIBUTED"
	// EnvRank is the rank, 0 … N−1 (MLX's name, read by every backend).
	EnvRank = "MLX_RANK"
	// EnvHostfile is the path of the ring backend's JSON hostfile.
	EnvHostfile = "MLX_HOSTFILE"
	// EnvWorldSize is the number of ranks (read by NCCL).
	EnvWorldSize = "MLX_WORLD_SIZE"
	// EnvNCCLHost and EnvNCCLPort are where rank 0 serves NCCL's unique id.
	EnvNCCLHost = "NCCL_HOST_IP"
	EnvNCCLPort = "NCCL_PORT"
)

// Backends are the backend names the launcher knows: ring (TCP; CPU
// processes) and nccl (one GPU per rank; the mlx-cuda-13 wheel).
var Backends = []string{"ring", "nccl"}

// CheckBackend returns an error naming the known backends when name is not
// one of them.
func CheckBackend(name string) error {
	if !slices.Contains(Backends, name) {
		return fmt.Errorf("unknown distributed backend %q (known: %s)", name, strings.Join(Backends, ", "))
	}
	return nil
}

// Joined reports whether this process was started as a rank by the launcher
// and with which backend.
func Joined() (backend string, ok bool) {
	b := os.Getenv(EnvBackend)
	return b, b != ""
}

// Join starts the backend named by SPECULA_DISTRIBUTED and returns this
// rank's group; it must run on the MLX worker. It checks the environment
// first so that a missing or malformed variable is named, not left to
// MLX's message. With the ring backend it returns once every rank has
// connected to its neighbours. A process joins once: after a success,
// later calls return the same group (a backend cannot start twice).
func Join() (*mlx.Group, error) {
	joined.Lock()
	defer joined.Unlock()
	if joined.g == nil {
		g, err := join()
		if err != nil {
			return nil, err
		}
		joined.g = g
	}
	return joined.g, nil
}

// joined is the group this process joined.
var joined struct {
	sync.Mutex
	g *mlx.Group
}

func join() (*mlx.Group, error) {
	backend, ok := Joined()
	if !ok {
		return nil, fmt.Errorf("distributed: %s is not set: this process was not started as a rank (use `specula launch -n N -- …`)", EnvBackend)
	}
	if err := CheckBackend(backend); err != nil {
		return nil, fmt.Errorf("distributed: %s: %w", EnvBackend, err)
	}
	rank, err := strconv.Atoi(os.Getenv(EnvRank))
	if err != nil || rank < 0 {
		return nil, fmt.Errorf("distributed: %s=%q is not a rank (a whole number from 0)", EnvRank, os.Getenv(EnvRank))
	}
	if backend == "ring" {
		path := os.Getenv(EnvHostfile)
		hosts, err := ReadHostfile(path)
		if err != nil {
			return nil, fmt.Errorf("distributed: %s: %w", EnvHostfile, err)
		}
		if rank >= len(hosts) {
			return nil, fmt.Errorf("distributed: %s=%d but the hostfile %s lists %d ranks", EnvRank, rank, path, len(hosts))
		}
	}
	g, err := mlx.InitDistributed(backend)
	if err != nil {
		return nil, fmt.Errorf("distributed: rank %d: %w", rank, err)
	}
	if g.Rank() != rank {
		return nil, fmt.Errorf("distributed: MLX started rank %d but %s is %d", g.Rank(), EnvRank, rank)
	}
	if backend == "ring" && rank > 0 {
		if err := privateKernelDir(rank); err != nil {
			return nil, fmt.Errorf("distributed: rank %d: %w", rank, err)
		}
	}
	return g, nil
}

// privateKernelDir gives rank (> 0) a CPU kernel folder of its own. MLX
// builds the fused CPU kernels of compiled functions under $TMPDIR, and
// package mlx holds a lock on that folder across the evaluation that may
// build them, so that two processes never build one kernel at once. A rank
// must not wait for that lock while another rank holds it: the holder's
// evaluation waits in a collective for this rank, and both would stall
// until the lock's timeout. So every rank but 0 builds its kernels in its
// own folder under the shared one (kept between runs: a later launch finds
// them built). MLX reads TMPDIR at each build, as os.TempDir does.
func privateKernelDir(rank int) error {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("specula-rank-%d", rank))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("a folder for this rank's CPU kernels: %w", err)
	}
	return os.Setenv("TMPDIR", dir)
}

// Hostfile is the ring backend's hostfile: for each rank in order, the
// "ip:port" addresses it listens on (one per connection to its neighbour).
type Hostfile [][]string

// LoopbackHostfile returns a hostfile of n ranks on 127.0.0.1, one port
// each, chosen free by the operating system. (A port can be taken between
// this choice and the rank binding it; the rank then fails to start and the
// launcher reports it.)
func LoopbackHostfile(n int) (Hostfile, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	h := make(Hostfile, n)
	for i := range h {
		// Every listener stays open until all are chosen, so the ports
		// differ.
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("distributed: choosing a loopback port for rank %d: %w", i, err)
		}
		ls = append(ls, l)
		h[i] = []string{l.Addr().String()}
	}
	return h, nil
}

// Write stores h as JSON at path.
func (h Hostfile) Write(path string) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadHostfile reads and checks a ring hostfile: a JSON list with one
// non-empty list of "ip:port" strings per rank, every rank with as many
// addresses.
func ReadHostfile(path string) (Hostfile, error) {
	if path == "" {
		return nil, fmt.Errorf("no hostfile given (a JSON list of each rank's [\"ip:port\", …])")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h Hostfile
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: not a ring hostfile (a JSON list of each rank's [\"ip:port\", …]): %w", path, err)
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("%s: the hostfile lists no ranks", path)
	}
	for i, addrs := range h {
		if len(addrs) == 0 || len(addrs) != len(h[0]) {
			return nil, fmt.Errorf("%s: rank %d has %d addresses and rank 0 has %d: every rank needs as many, at least one", path, i, len(addrs), len(h[0]))
		}
		for _, a := range addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("%s: rank %d: address %q is not ip:port", path, i, a)
			}
		}
	}
	return h, nil
}
