package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/plugins/sdk"
)

// process is one running plugin (or an in-process connection, with no
// client).
type process struct {
	name   string
	path   string
	client *plugin.Client // nil for an in-process connection
	cmd    *exec.Cmd      // the plugin's command; its context ends it by force
	// cancel ends the process by force (SIGKILL to its process group,
	// through cmd's context); nil for an in-process connection.
	cancel context.CancelFunc
	rpc    draftv1.DraftClient
	pid    int
	socket string // the Unix socket it serves on, once the handshake is done
	log    *hclogAdapter

	killOnce sync.Once
	state    *os.ProcessState // how it ended, once kill has returned (nil if unknown)
}

// exited reports whether the plugin process has ended.
func (p *process) exited() bool { return p.client != nil && p.client.Exited() }

// Shutting a plugin down is bounded: a frozen plugin (stopped, deadlocked,
// swapping) never answers go-plugin's graceful Shutdown request, and
// go-plugin waits for that answer without a deadline.
const (
	// killGrace is how long a plugin may take to end after the graceful
	// Shutdown request before it is killed (SIGKILL to its process group).
	// go-plugin gives a plugin the same time to exit after that request.
	killGrace = 2 * time.Second
	// killWait bounds the wait, after SIGKILL, for go-plugin to notice the
	// end (the process exits, its pipes close): the kernel ends a killed
	// process at once, even a stopped one, so this is never reached unless
	// the process is stuck in the kernel.
	killWait = 5 * time.Second
)

// kill ends the process and waits for it: go-plugin's graceful shutdown
// first, then, after grace, SIGKILL. It returns within grace + killWait
// whatever the process does; concurrent and later calls wait for the first.
// It removes the process's socket file, which a killed plugin leaves.
func (p *process) kill(grace time.Duration) {
	if p.client == nil {
		return
	}
	p.killOnce.Do(func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.client.Kill()
		}()
		ended := true
		t := time.NewTimer(grace)
		select {
		case <-done:
		case <-t.C:
			p.cancel()
			select {
			case <-done:
			case <-time.After(killWait):
				ended = false
				p.log.log.Error("plugin process did not end after SIGKILL; leaving it", "pid", p.pid, "path", p.path)
			}
		}
		t.Stop()
		p.cancel()
		if ended {
			// client.Kill waited for go-plugin's goroutines, Wait included.
			p.state = p.cmd.ProcessState
		}
		if p.socket != "" {
			if err := os.Remove(p.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
				p.log.log.Debug("removing the plugin's socket", "socket", p.socket, "error", err)
			}
		}
	})
}

// passedEnv lists the host variables a plugin inherits (go-plugin's
// SkipHostEnv is set; the child gets only these, the cookie and ours).
var passedEnv = []string{"PATH", "HOME", "TMPDIR", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH",
	"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "SPECULA_DEVICE",
	// The CPU BLAS the plugin's MLX uses, and its threads.
	"SPECULA_BLAS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"}

// childEnv is the explicit environment of a plugin process.
func (h *Host) childEnv(sockets string) []string {
	var env []string
	for _, k := range passedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MLX_") {
			env = append(env, kv)
		}
	}
	env = append(env, plugin.EnvUnixSocketDir+"="+sockets, sdk.EnvLogLevel+"="+h.pluginLogLevel())
	return append(env, h.cfg.Env...)
}

func (h *Host) pluginLogLevel() string {
	ctx := context.Background()
	switch {
	case h.log.Enabled(ctx, -4+0):
		return "debug"
	case h.log.Enabled(ctx, 0):
		return "info"
	case h.log.Enabled(ctx, 4):
		return "warn"
	}
	return "error"
}

// launch starts the binary c after go-plugin has checked its SHA-256 against
// sha, and connects to it. Cancelling ctx (or closing the host) during the
// start kills the binary and returns an error that wraps ctx's.
func (h *Host) launch(ctx context.Context, c *Candidate, sha string) (*process, error) {
	name := c.File.Name
	sum, err := hex.DecodeString(sha)
	if err != nil {
		return nil, fmt.Errorf("sha256 %q: %v", sha, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sockets, err := socketDir()
	if err != nil {
		return nil, err
	}
	logger := newHCLogAdapter(h.log, "plugin."+name, filepath.Base(c.Path))
	// The command's own context is the way to kill it by force: exec then
	// calls cmd.Cancel (SIGKILL to the plugin's process group) unless the
	// process has been waited for already, so no pid can be reused by then.
	procCtx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(procCtx, c.Path)
	cmd.Env = h.childEnv(sockets)
	ownProcessGroup(cmd)
	cmd.Cancel = func() error { return killProcess(cmd.Process) }
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake(),
		VersionedPlugins: sdk.ClientPlugins(),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		SecureConfig:     &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()},
		Managed:          true,
		SkipHostEnv:      true,
		StartTimeout:     h.cfg.StartTimeout,
		UnixSocketConfig: &plugin.UnixSocketConfig{TempDir: sockets},
		GRPCDialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(sdk.MaxMessageSize), grpc.MaxCallSendMsgSize(sdk.MaxMessageSize))},
		Logger:     logger,
		Stderr:     logger.recent.raw(),
		SyncStdout: logger.syncStdout(),
		SyncStderr: logger.syncStderr(),
	})
	p := &process{name: name, path: c.Path, client: client, cmd: cmd, cancel: cancel, log: logger}
	// Tracked from now on, so that Close ends it even while it starts.
	h.track(p)
	// go-plugin waits for the handshake holding the client's lock (Kill
	// included) for up to StartTimeout; killing the process is what ends
	// that wait early.
	stopOnCtx := context.AfterFunc(ctx, cancel)
	stopOnClose := context.AfterFunc(h.done, cancel)
	rpc, err := client.Client()
	stopOnCtx()
	stopOnClose()
	if err != nil {
		h.stop(p, 0)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("plugin %s: start interrupted: %w", name, ctx.Err())
		}
		if h.isClosed() {
			return nil, fmt.Errorf("plugin %s: start interrupted: the plugin host was closed", name)
		}
		return nil, launchError(name, c, err, p.state, logger.recent.String())
	}
	raw, err := rpc.Dispense(sdk.PluginKey)
	if err != nil {
		h.stop(p, killGrace)
		return nil, fmt.Errorf("plugin %s (%s): dispensing the draft service: %w", name, c.Path, err)
	}
	dc, ok := raw.(draftv1.DraftClient)
	if !ok {
		h.stop(p, killGrace)
		return nil, fmt.Errorf("plugin %s (%s): the draft service is a %T", name, c.Path, raw)
	}
	p.rpc = dc
	if rc := client.ReattachConfig(); rc != nil {
		h.mu.Lock()
		p.pid = rc.Pid
		if rc.Addr != nil && rc.Addr.Network() == "unix" && filepath.Dir(rc.Addr.String()) == sockets {
			p.socket = rc.Addr.String()
		}
		h.mu.Unlock()
	}
	h.log.Debug("plugin started", "plugin", name, "path", c.Path, "pid", p.pid, "protocol", client.NegotiatedVersion())
	return p, nil
}

// launchError explains a failed start in one line, with the plugin's last
// complaints. state is how the process ended (nil if unknown).
func launchError(name string, c *Candidate, err error, state *os.ProcessState, stderr string) error {
	msg := err.Error()
	// go-plugin appends a generic checklist to some errors; the first line
	// and our hint say more.
	first, _, _ := strings.Cut(strings.TrimSpace(msg), "\n")
	exited := state != nil && state.Exited()
	var why string
	switch {
	case errors.Is(err, plugin.ErrChecksumsDoNotMatch) || strings.Contains(msg, "checksums did not match"):
		why = "the binary's SHA-256 differs from the manifest's sha256: it changed since it was checked; reinstall it or update the manifest"
	case strings.Contains(msg, "exited before we could connect"),
		strings.Contains(msg, "Unrecognized remote plugin message") && strings.TrimSpace(strings.TrimPrefix(first, "Unrecognized remote plugin message:")) == "":
		// It closed its stdout without a line: it exited (or closed it).
		switch {
		case exited:
			why = fmt.Sprintf("it exited with status %d before the handshake, printing nothing on stdout; is it a specula plugin built with the SDK?", state.ExitCode())
		case state != nil && !state.Success() && state.String() != "signal: killed":
			why = fmt.Sprintf("it ended (%s) before the handshake; is it a specula plugin built with the SDK?", state)
		default:
			why = "it closed its stdout without printing the go-plugin handshake; is it a specula plugin built with the SDK?"
		}
	case strings.Contains(msg, "Unrecognized remote plugin message"):
		line := strings.TrimSpace(strings.TrimPrefix(first, "Unrecognized remote plugin message:"))
		why = fmt.Sprintf("it printed %q on stdout instead of the go-plugin handshake: either it is not a specula plugin, or it writes to stdout before serving (plugins must log to stderr)", clip(line, 80))
	case strings.Contains(msg, "incompatible API version"):
		why = fmt.Sprintf("it speaks another plugin protocol version than this host (%d); install a build of the plugin for this specula version", sdk.ProtocolVersion)
	case strings.Contains(msg, "incompatible core API"):
		why = "it was built with an incompatible go-plugin; rebuild it with the specula SDK"
	case strings.Contains(msg, "timeout while waiting"):
		why = "it did not complete the handshake in time"
	default:
		why = first
	}
	out := fmt.Sprintf("plugin %s (%s) failed to start: %s", name, c.Path, why)
	if stderr != "" {
		out += " (plugin said: " + stderr + ")"
	}
	return errors.New(out)
}

// clip shortens s to at most n bytes (on a rune boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// describe calls Describe and checks the answer against the file name: the
// plugin's name, version, protocol and API version must match, and it must
// serve at least one draft architecture.
func (h *Host) describe(ctx context.Context, p *process, c *Candidate) (*draftv1.DescribeResponse, error) {
	ctx, cancel := h.callContext(ctx, h.cfg.Timeouts.Describe)
	defer cancel()
	d, err := p.rpc.Describe(ctx, &draftv1.DescribeRequest{HostVersion: h.cfg.HostVersion, ProtocolVersions: []uint32{sdk.ProtocolVersion}})
	if err != nil {
		return nil, fmt.Errorf("plugin %s (%s): Describe failed: %v", p.name, c.Path, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("plugin %s (%s): Describe %s", p.name, c.Path, fmt.Sprintf(format, args...))
	}
	switch {
	case d.GetName() != "" && d.GetName() != c.File.Name:
		return nil, bad("names the plugin %q but its file name says %q; rename the file or rebuild the plugin", d.GetName(), c.File.Name)
	case d.GetPluginVersion() != c.File.Version:
		return nil, bad("reports version %s but its file name says v%s; rename the file to match the build", d.GetPluginVersion(), c.File.Version)
	case d.GetProtocolVersion() != sdk.ProtocolVersion:
		return nil, bad("reports protocol version %d; this host speaks %d", d.GetProtocolVersion(), sdk.ProtocolVersion)
	case len(d.GetArchitectures()) == 0:
		return nil, bad("lists no architectures")
	}
	for _, a := range d.GetArchitectures() {
		if a.GetName() == "" {
			return nil, bad("lists an architecture without a name")
		}
		if !slices.Contains(a.GetCapabilities(), "draft") {
			return nil, bad("lists architecture %s without capability \"draft\" (plugins serve drafts only)", a.GetName())
		}
	}
	return d, nil
}

// hostOS names the platform in messages.
var hostOS = runtime.GOOS + "_" + runtime.GOARCH
