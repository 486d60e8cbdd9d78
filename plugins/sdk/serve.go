package sdk

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/specula-dev/specula/plugins/proto/draftv1"
)

// EnvLogLevel names the environment variable that sets a plugin's log level
// ("debug", "info", "warn", "error"; default "info"). The host passes it.
const EnvLogLevel = "SPECULA_PLUGIN_LOG_LEVEL"

// parentPoll is how often a plugin checks that its host is still alive.
const parentPoll = 500 * time.Millisecond

// Serve runs p as a plugin process and returns when the host ends it (or on
// SIGTERM/SIGINT, or when the host process dies). Call it from main:
//
//	func main() {
//		sdk.Serve(sdk.Plugin{Name: "acme-dflash3", Version: "1.2.0",
//			Architectures: []sdk.Architecture{sdk.BlockDraft("AcmeDraft", acme.New)}})
//	}
//
// Run by hand (without the host's cookie), the binary answers `describe`
// with its description as JSON on stdout, and otherwise says it is a plugin
// and exits with status 1.
//
// Serve keeps stdout for go-plugin's handshake: it logs as hclog-style JSON
// on stderr (slog's default logger and the standard library logger included;
// the host files those lines under plugin.<name>) and ends the process with
// a message if anything else writes to stdout before the handshake.
func Serve(p Plugin) {
	stderr := os.Stderr
	if err := p.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		os.Exit(1)
	}
	if os.Getenv(MagicCookieKey) != MagicCookieValue {
		os.Exit(runByHand(p, os.Args[1:], os.Stdout, stderr))
	}
	logger := newLogger(stderr, os.Getenv(EnvLogLevel))
	slog.SetDefault(logger)
	log.SetOutput(stderr)
	log.SetFlags(0)

	if err := guardStdout(stderr); err != nil {
		logger.Warn("cannot guard stdout", "error", err)
	}
	if p.Setup != nil {
		if err := p.Setup(); err != nil {
			logger.Error("plugin setup failed", "plugin", p.Name, "error", err)
			os.Exit(1)
		}
	}
	srv, err := NewServer(p, logger)
	if err != nil {
		logger.Error(err.Error())
		os.Exit(1)
	}

	var impl draftv1.DraftServer = srv
	if p.Wrap != nil {
		impl = p.Wrap(srv)
	}
	var (
		mu   sync.Mutex
		gsrv *grpc.Server
	)
	stop := func(why string) {
		logger.Info("plugin shutting down", "reason", why)
		mu.Lock()
		g := gsrv
		mu.Unlock()
		if g == nil {
			os.Exit(0)
		}
		g.Stop() // plugin.Serve returns once the server has stopped
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	go func() { stop("signal " + (<-sigs).String()) }()
	go watchParent(os.Getppid(), func() { stop("the host process exited") })

	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake(),
		VersionedPlugins: ServerPlugins(impl),
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			s := NewGRPCServer(opts)
			mu.Lock()
			gsrv = s
			mu.Unlock()
			return s
		},
		Logger: hclog.New(&hclog.LoggerOptions{Name: p.Name, Output: stderr, JSONFormat: true, Level: hclog.LevelFromString(levelName(os.Getenv(EnvLogLevel)))}),
	})
	srv.shutdown()
	logger.Debug("plugin stopped")
}

// watchParent calls gone once the parent process has exited (the process is
// then re-parented, so its parent pid changes).
func watchParent(ppid int, gone func()) {
	for {
		if os.Getppid() != ppid {
			gone()
			return
		}
		time.Sleep(parentPoll)
	}
}

// runByHand serves the command line of a binary started without the host.
func runByHand(p Plugin, args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "describe" {
		if err := writeDescription(stdout, p); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "This binary is specula plugin %s %s: specula starts it when a manifest names it ([draft] plugin = %q with its sha256).\nRun it with the argument describe to see what it serves.\n", p.Name, p.Version, p.Name)
	return 1
}

// Description is what `describe` prints: Describe's answer plus the plugin
// API version that file names carry.
type Description struct {
	Name            string            `json:"name"`
	Version         string            `json:"version"`
	ProtocolVersion int               `json:"protocol_version"`
	SDKVersion      string            `json:"sdk_version"`
	API             string            `json:"api"`
	Architectures   []ArchDescription `json:"architectures"`
}

// ArchDescription is one architecture in a Description.
type ArchDescription struct {
	Name          string   `json:"name"`
	Capabilities  []string `json:"capabilities"`
	NeedsFeatures bool     `json:"needs_features"`
}

// Describe returns p's description.
func (p Plugin) Describe() Description {
	d := Description{Name: p.Name, Version: p.Version, ProtocolVersion: ProtocolVersion, SDKVersion: Version, API: fmt.Sprintf("x%d.%d", APIMajor, APIMinor)}
	for _, a := range p.describe().Architectures {
		d.Architectures = append(d.Architectures, ArchDescription{Name: a.Name, Capabilities: a.Capabilities, NeedsFeatures: a.NeedsFeatures})
	}
	return d
}

func writeDescription(w io.Writer, p Plugin) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p.Describe())
}

// newLogger returns a slog logger writing hclog-style JSON lines (@level,
// @message, @timestamp) that the host parses into its own structured log.
func newLogger(w io.Writer, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(levelName(level)))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: lv,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.LevelKey:
				return slog.String("@level", strings.ToLower(a.Value.String()))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format(jsonTimeFormat))
			}
			return a
		},
	}))
}

func levelName(s string) string {
	switch s = strings.ToLower(s); s {
	case "debug", "info", "warn", "error":
		return s
	case "trace":
		return "debug"
	}
	return "info"
}

// jsonTimeFormat is the @timestamp layout go-plugin parses in a plugin's
// JSON log lines; another layout makes it file the line as plain text.
const jsonTimeFormat = "2006-01-02T15:04:05.000000Z07:00"
