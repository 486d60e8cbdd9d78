package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/specula-dev/specula/distributed"
	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/server"
)

func init() {
	register(&command{name: "serve", summary: "serve manifests over ollama's and OpenAI's HTTP APIs", run: runServe})
}

// exitInterrupted is the exit status after Ctrl-C (128 + SIGINT).
const exitInterrupted = 130

func runServe(e *env, args []string) int {
	fs := newFlags(e, "serve", "[flags] MANIFEST|FOLDER...")
	host := fs.String("host", "127.0.0.1", "listen on this `address` (0.0.0.0: every interface; set SPECULA_API_KEY then)")
	port := fs.Int("port", 11435, "listen on this `port` (ollama's is 11434)")
	keepAlive := fs.Duration("keep-alive", server.DefaultKeepAlive, "keep a model loaded this long after its last request when the request does not say (negative: until shutdown)")
	maxQueue := fs.Int("max-queue", server.DefaultMaxQueue, "requests that may wait per model; more are answered 503 with Retry-After")
	maxBody := fs.Int64("max-body", server.DefaultMaxBodyBytes, "largest request body in `bytes` (413 above)")
	timeout := fs.Duration("request-timeout", 0, "stop a request this long after it arrived (0: no limit)")
	promptCache := fs.Int64("prompt-cache-bytes", server.DefaultPromptCacheBytes, "bytes of prompt-cache checkpoints per model (0: no prompt cache)")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "on SIGTERM or Ctrl-C, let running requests finish this long before cancelling them")
	asJSON := fs.Bool("json", false, "write the log as JSON lines")
	addPluginDirFlag(fs)
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if _, ok := distributed.Joined(); ok {
		// Every rank would answer its own requests, and a request reaching
		// one rank would leave the others waiting in its first all_sum.
		fmt.Fprintln(e.stderr, "specula serve: the server does not run as ranks of `specula launch` yet (only rank 0 would receive requests, and the others must run every forward with it): use `specula launch -n N -- run` or `bench`, or serve from one process")
		return exitUsage
	}
	if len(pos) == 0 {
		fmt.Fprintln(e.stderr, "specula serve: give at least one manifest (or a folder of manifests)")
		fs.Usage()
		return exitUsage
	}
	if *port < 0 || *port > 65535 {
		fmt.Fprintf(e.stderr, "specula serve: --port %d is out of range: want 0 to 65535\n", *port)
		return exitUsage
	}
	// Values with no meaning are refused rather than replaced by a default
	// the user did not ask for (--keep-alive's negative values mean
	// "until shutdown").
	for _, c := range []struct {
		bad       bool
		flag, got string
		want      string
	}{
		{*maxQueue < 1, "max-queue", strconv.Itoa(*maxQueue), ">= 1"},
		{*maxBody < 1, "max-body", strconv.FormatInt(*maxBody, 10), ">= 1"},
		{*promptCache < 0, "prompt-cache-bytes", strconv.FormatInt(*promptCache, 10), ">= 0 (0: no prompt cache)"},
		{*timeout < 0, "request-timeout", timeout.String(), ">= 0 (0: no limit)"},
		{*grace < 0, "shutdown-grace", grace.String(), ">= 0 (0: cancel running requests at once)"},
	} {
		if c.bad {
			fmt.Fprintf(e.stderr, "specula serve: --%s %s is out of range: want %s\n", c.flag, c.got, c.want)
			return exitUsage
		}
	}
	paths, err := server.ManifestPaths(pos)
	if err != nil {
		return fail(e, "serve", err)
	}

	// A server logs its requests: info level unless SPECULA_LOG says.
	level := slog.LevelInfo
	if lv := os.Getenv("SPECULA_LOG"); lv != "" {
		_ = level.UnmarshalText([]byte(lv))
	}
	var handler slog.Handler = slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})
	if *asJSON {
		handler = slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(handler)
	slog.SetDefault(log)

	server.Version = version
	srv, err := server.New(server.Config{
		Manifests:      paths,
		Load:           server.EngineLoader(*promptCache, &engine.Options{LoadPlugin: loadPlugin, Logger: log}),
		KeepAlive:      *keepAlive,
		MaxQueue:       *maxQueue,
		MaxBodyBytes:   *maxBody,
		RequestTimeout: *timeout,
		APIKey:         os.Getenv("SPECULA_API_KEY"),
		Logger:         log,
	})
	if err != nil {
		return fail(e, "serve", err)
	}
	defer srv.Close()

	addr := net.JoinHostPort(*host, strconv.Itoa(*port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fail(e, "serve", err)
	}
	// Request contexts derive from base: cancelling it after the grace
	// period stops the generations still running (at their next round).
	base, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	// serve shuts down by itself: SIGTERM lets running requests finish and
	// exits 0, Ctrl-C does the same and exits 130.
	releaseSignals()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(e.stderr, "specula serve: listening on http://%s (%d models; ollama API under /api, OpenAI's under /v1)\n", ln.Addr(), len(paths))

	var sig os.Signal
	select {
	case err := <-served:
		return fail(e, "serve", err)
	case sig = <-sigs:
	}
	log.Info("shutting down: finishing running requests", "signal", sig.String(), "grace", grace.String())
	ctx, cancel := context.WithTimeout(context.Background(), *grace)
	go func() {
		// A second signal cancels at once.
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := hs.Shutdown(ctx); err != nil {
		log.Warn("cancelling the requests still running", "err", err)
		cancelAll()
		stop, done := context.WithTimeout(context.Background(), 30*time.Second)
		defer done()
		_ = hs.Shutdown(stop)
	}
	cancel()
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("serve", "err", err)
	}
	srv.Close()
	log.Info("stopped")
	if sig == os.Interrupt {
		return exitInterrupted
	}
	return exitOK
}
