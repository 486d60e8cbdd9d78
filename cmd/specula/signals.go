package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Interruption: SIGINT (Ctrl-C) and SIGTERM cancel the command's context
// (env.ctx). Every command stops at its next step: run prints what it
// generated (its stats line, or its JSON, says "interrupted"), bench and the
// others stop. The program then exits with 130 (SIGINT) or 143 (SIGTERM),
// whatever the command returned, after ending its plugins. A command that
// does not return within interruptGrace (a step that cannot be cut short:
// reading weights, a long prefill, MLX building a kernel), or a second
// signal, ends the plugins and exits at once with the same code, printing
// nothing more.

// interruptGrace is how long an interrupted command may take to return by
// itself (and print what it has, such as run --json's result) before the
// program ends its plugins and exits. A step rarely takes more than a
// second; a busy machine can stretch one several times over.
const interruptGrace = 10 * time.Second

// interruption records the first signal received.
var interruption struct {
	mu  sync.Mutex
	sig os.Signal
}

// watched is the channel the watch receives signals on (nil before
// handleSignals), so that releaseSignals can end it.
var watched chan os.Signal

// handleSignals starts the watch and returns the context it cancels.
func handleSignals() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	watched = sigs
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig, ok := <-sigs
		if !ok {
			return // released: the command handles signals itself
		}
		interruption.mu.Lock()
		interruption.sig = sig
		interruption.mu.Unlock()
		cancel()
		select {
		case <-sigs:
		case <-time.After(interruptGrace):
		}
		closePlugins()
		removeTemporaries()
		os.Exit(interruptedCode())
	}()
	return ctx
}

// temporaries are the files and folders a command is writing before it
// renames them into place; a program that exits without the command
// returning (the grace passed, or a second signal came) removes them, so
// that an interrupted write never leaves gigabytes of partial output.
var temporaries struct {
	mu    sync.Mutex
	paths map[string]bool
}

// removeOnForcedExit registers path (a temporary file or folder) for
// removal if the program exits at once; the returned forget ends that,
// once the command has renamed or removed path itself.
func removeOnForcedExit(path string) (forget func()) {
	temporaries.mu.Lock()
	defer temporaries.mu.Unlock()
	if temporaries.paths == nil {
		temporaries.paths = map[string]bool{}
	}
	temporaries.paths[path] = true
	return func() {
		temporaries.mu.Lock()
		defer temporaries.mu.Unlock()
		delete(temporaries.paths, path)
	}
}

// removeTemporaries removes every registered temporary path. The lock stays
// held so that no command registers or forgets one while the program exits.
func removeTemporaries() {
	temporaries.mu.Lock()
	for path := range temporaries.paths {
		removeSettled(path)
	}
}

// removeSettled removes path and everything below it, trying again for a
// short while when a writer that has not stopped yet (the MLX worker finishing
// a shard after the command was cancelled) adds files while it runs, which
// makes a single RemoveAll fail with "directory not empty".
func removeSettled(path string) {
	for range 100 {
		if os.RemoveAll(path) == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// interruptedCode is the exit code of an interrupted program (128 plus the
// signal's number, as shells report it), or 0 if no signal came.
func interruptedCode() int {
	interruption.mu.Lock()
	defer interruption.mu.Unlock()
	switch interruption.sig {
	case nil:
		return 0
	case syscall.SIGTERM:
		return 128 + int(syscall.SIGTERM)
	}
	return 128 + int(syscall.SIGINT)
}

// releaseSignals ends the watch, for a command that handles SIGINT and
// SIGTERM itself: serve (a graceful shutdown that exits 0 after SIGTERM)
// and the interactive chat (Ctrl-C stops an answer, not the program). Call
// it before the first signal matters, at most once.
func releaseSignals() {
	if watched != nil {
		signal.Stop(watched)
		close(watched)
		watched = nil
	}
}
