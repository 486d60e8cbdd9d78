// Command specula runs large language models with speculative decoding.
//
// Each subcommand lives in its own file and registers itself in commands; main
// only dispatches. Exit codes: 0 success, 1 failure (one-line cause on stderr),
// 2 usage error, 130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/specula-dev/specula/mlx"
)

// command is one subcommand of the program.
type command struct {
	name    string
	summary string
	// run executes the subcommand with its arguments (the subcommand name
	// removed) and returns the process exit code.
	run func(env *env, args []string) int
}

// env is what a subcommand may touch: its output streams and its context,
// which is cancelled when the program is interrupted (see signals.go). Tests
// build one over buffers; dispatch fills in a nil ctx.
type env struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("specula: duplicate subcommand " + c.name)
	}
	commands[c.name] = c
}

// Exit codes shared by every subcommand.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	// Settings in the environment are easy to mistype and persist in a
	// shell: a bad one is worth one line, not a refusal of every command.
	if err := setupLogging(os.Stderr, os.Getenv("SPECULA_LOG")); err != nil {
		fmt.Fprintf(os.Stderr, "specula: warning: %v\n", err)
	}
	if err := mlx.CheckDeviceEnv(); err != nil {
		fmt.Fprintf(os.Stderr, "specula: warning: %v\n", err)
	}
	os.Exit(runMain(os.Args[1:]))
}

// runMain dispatches args and then, on every way out (a panic included),
// ends the plugin processes the command started. (os.Exit skips deferred
// calls, so main cannot defer it.) A command that was interrupted exits with
// the signal's code, whatever it returned.
func runMain(args []string) (code int) {
	ctx := handleSignals()
	defer func() {
		closePlugins()
		if c := interruptedCode(); c != 0 {
			code = c
		}
	}()
	return dispatch(&env{ctx: ctx, stdout: os.Stdout, stderr: os.Stderr}, args)
}

// setupLogging sends the libraries' structured logs to w at the level named
// by SPECULA_LOG ("debug", "info", "warn" (default), "error"): a command's
// own output stays clean unless the user asks for more. It returns an error
// for a value that is not a level (the default applies).
func setupLogging(w io.Writer, level string) error {
	var l slog.Level
	var err error
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "info":
		l = slog.LevelInfo
	case "error":
		l = slog.LevelError
	case "warn", "warning", "":
		l = slog.LevelWarn
	default:
		l = slog.LevelWarn
		err = fmt.Errorf("SPECULA_LOG=%q is not a level (debug, info, warn or error): using warn", level)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})))
	return err
}

// builtinCommands are the words dispatch answers itself, outside commands.
var builtinCommands = []string{"-h", "-help", "--help", "help", "-version", "--version", "version"}

func dispatch(e *env, args []string) int {
	if e.ctx == nil {
		e.ctx = context.Background()
	}
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			c, ok := commands[args[1]]
			if !ok {
				return unknownCommand(e, args[1])
			}
			return c.run(e, []string{"--help"})
		}
		usage(e.stdout)
		return exitOK
	case "-version", "--version", "version":
		// The MLX build and the device it picked: after an install or a
		// bundle, the quickest proof that the GPU backend is the one loaded.
		dev, err := mlx.Call(e.ctx, func() (mlx.Device, error) { return mlx.CurrentDevice(), nil })
		if err != nil {
			return fail(e, "version", err)
		}
		fmt.Fprintf(e.stdout, "specula %s (MLX %s, device %s)\n", version, mlx.Version(), dev)
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		return unknownCommand(e, args[0])
	}
	return c.run(e, args[1:])
}

// unknownCommand reports a command name the program does not have.
func unknownCommand(e *env, name string) int {
	fmt.Fprintf(e.stderr, "specula: unknown command %q\nsee 'specula --help'\n", name)
	return exitUsage
}

// version is the program version; release builds set it with -ldflags -X.
var version = "0.1.0-dev"

func usage(w io.Writer) {
	fmt.Fprintln(w, "specula: fast LLM generation by speculative decoding")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: specula <command> [flags] [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'specula <command> --help' for a command's flags.")
	fmt.Fprintln(w, "Set SPECULA_LOG=info (or debug) to see the libraries' logs on stderr.")
}

// newFlags returns a flag set for a subcommand that reports errors instead of
// exiting. --help prints the usage (synopsis and flags) once, on stdout;
// after a usage error, fs.Usage() prints only a pointer to --help on stderr,
// so a mistake costs the user one line of cause and one of hint.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		switch fs.Output() {
		case io.Discard: // the flag package reporting a parse error: parseFlags words it
		case e.stdout:
			fmt.Fprintf(e.stdout, "Usage: specula %s %s\n\nFlags:\n", name, synopsis)
			fs.PrintDefaults()
		default:
			fmt.Fprintf(e.stderr, "see 'specula %s --help'\n", name)
		}
	}
	return fs
}

// parseFlags parses args into fs, allowing flags after positional arguments
// (as users of other CLIs expect: `specula run -m x.toml "hi" --json`). It
// returns the positional arguments, or ok=false with the exit code to use
// when parsing ended the command: help requested (usage on stdout, 0) or a
// bad flag (its cause and a pointer to --help on stderr, 2). A "--" ends
// flag parsing.
func parseFlags(e *env, fs *flag.FlagSet, args []string) (positional []string, code int, ok bool) {
	for {
		fs.SetOutput(io.Discard)
		err := fs.Parse(args)
		fs.SetOutput(e.stderr)
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(e.stdout)
				fs.Usage()
				fs.SetOutput(e.stderr)
				return nil, exitOK, false
			}
			fmt.Fprintf(e.stderr, "specula %s: %v\n", fs.Name(), err)
			fs.Usage()
			return nil, exitUsage, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, 0, true
		}
		// fs.Parse consumed a "--" terminator if the argument before rest was one.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), 0, true
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// noArguments reports, for a command that takes no positional argument, the
// first one given (`bench -m m.toml --depths 1 3` would otherwise drop the 3
// without a word) as a usage error: its cause, then the pointer to --help.
// It returns ok=false with the exit code when there is one.
func noArguments(e *env, fs *flag.FlagSet, rest []string) (code int, ok bool) {
	if len(rest) == 0 {
		return 0, true
	}
	fmt.Fprintf(e.stderr, "specula %s: unexpected argument %q\n", fs.Name(), rest[0])
	fs.Usage()
	return exitUsage, false
}

// fail prints a one-line cause and returns the failure exit code. A command
// that fails because it was interrupted says so (runMain then exits with the
// signal's code).
func fail(e *env, cmd string, err error) int {
	msg := strings.TrimSpace(err.Error())
	if errors.Is(err, context.Canceled) && e.ctx.Err() != nil {
		msg = "interrupted"
	}
	fmt.Fprintf(e.stderr, "specula %s: %s\n", cmd, msg)
	return exitFailure
}
