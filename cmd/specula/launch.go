package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"

	"github.com/specula-dev/specula/distributed"
	"github.com/specula-dev/specula/mlx"
)

func init() {
	register(&command{name: "launch", summary: "run a command as N ranks of one distributed group (tensor parallelism)", run: runLaunch})
}

// writingCommands write a file or folder and use no distributed group: as
// ranks, each would write the same output, one rename losing to another's.
var writingCommands = []string{"synth", "quantize", "forward"}

// runLaunch starts N ranks of this program running one subcommand, with the
// environment of the chosen backend (package distributed), prints rank 0's
// output, forwards SIGINT and SIGTERM to every rank, and ends every rank when
// one fails, naming it and how it ended. It exits with rank 0's code when
// all succeed, else with the failed rank's (128 + the signal for one killed
// by a signal). With --hostfile, the group spans the file's hosts and this
// launcher starts those of host --node, after meeting the other hosts'
// launchers (distributed.Meet); a node whose peer fails ends its ranks and
// exits with 1.
func runLaunch(e *env, args []string) int {
	fs := newFlags(e, "launch", "(-n N | --hostfile FILE --node I) [--backend ring|nccl] [--] <command> [flags] [arguments]")
	n := fs.Int("n", 0, "number of ranks (processes) to start on this host, at least 1 (2 with the ring backend); with --hostfile, the whole group's (optional: the file says)")
	backend := fs.String("backend", "", "distributed backend: ring (TCP between CPU processes) or nccl (one GPU per rank); default the hostfile's \"backend\", else nccl with a GPU build of MLX, else ring")
	hostfile := fs.String("hostfile", "", "spread the group over several hosts, listed in a JSON `FILE` like {\"hosts\": [{\"ips\": [\"10.0.0.1\"], \"slots\": 2}, …], \"port\": 32323}; run the same launch on every host, each with its --node (docs/getting-started.md)")
	node := fs.Int("node", -1, "with --hostfile: which host of the file this is, from 0; node 0 shows rank 0's output")
	startTimeout := fs.Duration("start-timeout", distributed.DefaultStartTimeout, "with --hostfile: how long to wait for the other hosts' launchers (and, on node 0, for them to report their ranks' end) before failing")
	// The subcommand's own flags follow it: parse only up to the first
	// argument that is not a flag (or "--"), unlike parseFlags.
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(e.stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(e.stdout)
		fs.Usage()
		return exitOK
	case err != nil:
		fmt.Fprintf(e.stderr, "specula launch: %v\n", err)
		fs.Usage()
		return exitUsage
	}
	rest := fs.Args()
	var cluster *distributed.Cluster
	if *hostfile != "" {
		if cluster, err = distributed.ReadCluster(*hostfile); err != nil {
			fmt.Fprintf(e.stderr, "specula launch: %v\n", err)
			return exitUsage
		}
		if *node < 0 {
			fmt.Fprintf(e.stderr, "specula launch: --hostfile %s needs --node I: which of its %d hosts this is, from 0 (the same file and a different --node on every host)\n", *hostfile, len(cluster.Hosts))
			return exitUsage
		}
		if err := cluster.CheckNode(*node); err != nil {
			fmt.Fprintf(e.stderr, "specula launch: %v\n", err)
			return exitUsage
		}
		if *n != 0 && *n != cluster.Ranks() {
			fmt.Fprintf(e.stderr, "specula launch: -n %d, but hostfile %s gives %d ranks (the sum of its hosts' \"slots\"): leave -n out or make them agree\n", *n, *hostfile, cluster.Ranks())
			return exitUsage
		}
		*n = cluster.Hosts[*node].Slots
		if *backend == "" {
			*backend = cluster.Backend
		}
	} else if *node >= 0 {
		fmt.Fprintf(e.stderr, "specula launch: --node %d needs --hostfile: the file lists the hosts it numbers\n", *node)
		return exitUsage
	}
	if *n < 1 {
		fmt.Fprintf(e.stderr, "specula launch: -n %d: give the number of ranks, at least 1 (e.g. -n 2)\n", *n)
		fs.Usage()
		return exitUsage
	}
	if len(rest) == 0 {
		fmt.Fprintln(e.stderr, "specula launch: no command to run: give it after the flags, e.g. specula launch -n 2 -- run -m model.toml \"hello\"")
		fs.Usage()
		return exitUsage
	}
	if rest[0] == "launch" {
		fmt.Fprintln(e.stderr, "specula launch: a rank cannot launch ranks itself: give the command to run (run, bench, …)")
		return exitUsage
	}
	if slices.Contains(writingCommands, rest[0]) {
		fmt.Fprintf(e.stderr, "specula launch: %s writes its output once; as %d ranks each would write it: run it without launch\n", rest[0], *n)
		return exitUsage
	}
	if _, ok := commands[rest[0]]; !ok && !slices.Contains(builtinCommands, rest[0]) {
		fmt.Fprintf(e.stderr, "specula launch: unknown command %q\nsee 'specula --help'\n", rest[0])
		return exitUsage
	}
	if *backend == "" {
		gpu, err := mlx.Call(e.ctx, func() (bool, error) { return mlx.CurrentDevice() == mlx.GPU, nil })
		if err != nil {
			return fail(e, "launch", err)
		}
		*backend = "ring"
		if gpu {
			*backend = "nccl"
		}
	}
	if err := distributed.CheckBackend(*backend); err != nil {
		fmt.Fprintf(e.stderr, "specula launch: --backend: %v\n", err)
		return exitUsage
	}
	size := *n
	if cluster != nil {
		size = cluster.Ranks()
	}
	if *backend == "ring" && size == 1 {
		// MLX's ring connects each rank to its neighbours; a lone rank
		// failed to start with "[ring] Couldn't connect (error: 111)".
		fmt.Fprintln(e.stderr, "specula launch: -n 1: the ring backend needs at least 2 ranks (each connects to its neighbours); run the command without launch for one process")
		return exitUsage
	}
	self, err := os.Executable()
	if err != nil {
		return fail(e, "launch", fmt.Errorf("finding this program to start its ranks: %w", err))
	}
	var peers *distributed.Peers
	if cluster != nil {
		// Before the signal handling below: Ctrl-C while waiting for the
		// other hosts cancels e.ctx, which ends the wait.
		if peers, err = distributed.Meet(e.ctx, cluster, *node, *backend, *startTimeout); err != nil {
			return fail(e, "launch", err)
		}
	}

	// The launcher forwards signals itself (each rank has a process group of
	// its own, so a terminal's Ctrl-C reaches the launcher alone).
	releaseSignals()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	forwarded := make(chan os.Signal, 2)
	var interrupted atomic.Bool
	go func() {
		for s := range sigs {
			interrupted.Store(true)
			forwarded <- s
		}
	}()

	l := &distributed.Launch{N: *n, Backend: *backend, Path: self, Args: rest, Stdout: e.stdout, Stderr: e.stderr, Signals: forwarded,
		Cluster: cluster, Node: *node}
	if peers != nil {
		l.Stop = peers.Failed()
	}
	err = l.Run(e.ctx)
	if peers != nil {
		// This node's own failure, or the peer's that stopped it, is the
		// one to report; the others' ends matter when its ranks succeeded.
		if perr := peers.Finish(err, *startTimeout); err == nil && perr != nil {
			return fail(e, "launch", perr)
		}
	}
	var re *distributed.RankError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &re):
		code := re.ExitCode()
		if interrupted.Load() && (code == 128+int(syscall.SIGINT) || code == 128+int(syscall.SIGTERM)) {
			return code // interrupted: rank 0 has said what it had
		}
		fmt.Fprintf(e.stderr, "specula launch: %v\n", err)
		return code
	}
	return fail(e, "launch", err)
}
