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

// runLaunch starts N ranks of this program running one subcommand, with the
// environment of the chosen backend (package distributed), prints rank 0's
// output, forwards SIGINT and SIGTERM to every rank, and ends every rank when
// one fails, naming it and how it ended. It exits with rank 0's code when
// all succeed, else with the failed rank's (128 + the signal for one killed
// by a signal).
func runLaunch(e *env, args []string) int {
	fs := newFlags(e, "launch", "-n N [--backend ring|nccl] [--] <command> [flags] [arguments]")
	n := fs.Int("n", 0, "number of ranks (processes) to start on this host, at least 1")
	backend := fs.String("backend", "", "distributed backend: ring (TCP between CPU processes) or nccl (one GPU per rank); default nccl with a GPU build of MLX, else ring")
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
	self, err := os.Executable()
	if err != nil {
		return fail(e, "launch", fmt.Errorf("finding this program to start its ranks: %w", err))
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

	l := &distributed.Launch{N: *n, Backend: *backend, Path: self, Args: rest, Stdout: e.stdout, Stderr: e.stderr, Signals: forwarded}
	err = l.Run(e.ctx)
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
