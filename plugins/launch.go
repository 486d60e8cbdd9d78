package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

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
	rpc    draftv1.DraftClient
	pid    int
	log    *hclogAdapter

	killOnce sync.Once
}

// exited reports whether the plugin process has ended.
func (p *process) exited() bool { return p.client != nil && p.client.Exited() }

// kill ends the process (gracefully through go-plugin's controller, then by
// force) and waits for it.
func (p *process) kill() {
	if p.client == nil {
		return
	}
	p.killOnce.Do(p.client.Kill)
}

// maxSocketDir bounds the socket folder's length: Unix socket paths are
// limited to 104 bytes on macOS (108 on Linux), and go-plugin adds
// "/plugin" and up to ten digits.
const maxSocketDir = 104 - len("/plugin") - 10 - 1

// socketDir returns a short per-user folder for the plugins' Unix sockets,
// made if needed with mode 0700.
func socketDir() (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" || len(base) > maxSocketDir/2 {
		base = os.TempDir()
	}
	dir := filepath.Join(base, fmt.Sprintf("specula-%d", os.Getuid()))
	if len(dir) > maxSocketDir {
		dir = fmt.Sprintf("/tmp/specula-%d", os.Getuid())
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("plugin socket folder %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("plugin socket folder %s has mode %v; other users must not reach it (chmod 700 it)", dir, st.Mode().Perm())
	}
	return dir, nil
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
// sha, and connects to it.
func (h *Host) launch(c *Candidate, sha string) (*process, error) {
	name := c.File.Name
	sum, err := hex.DecodeString(sha)
	if err != nil {
		return nil, fmt.Errorf("sha256 %q: %v", sha, err)
	}
	sockets, err := socketDir()
	if err != nil {
		return nil, err
	}
	logger := newHCLogAdapter(h.log, "plugin."+name)
	cmd := exec.Command(c.Path)
	cmd.Env = h.childEnv(sockets)
	ownProcessGroup(cmd)
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
		Logger: logger,
		Stderr: logger.recent.raw(),
	})
	p := &process{name: name, path: c.Path, client: client, log: logger}
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, launchError(name, c, err, logger.recent.String())
	}
	raw, err := rpc.Dispense(sdk.PluginKey)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("plugin %s (%s): dispensing the draft service: %w", name, c.Path, err)
	}
	dc, ok := raw.(draftv1.DraftClient)
	if !ok {
		client.Kill()
		return nil, fmt.Errorf("plugin %s (%s): the draft service is a %T", name, c.Path, raw)
	}
	p.rpc = dc
	if rc := client.ReattachConfig(); rc != nil {
		p.pid = rc.Pid
	}
	h.track(p)
	h.log.Debug("plugin started", "plugin", name, "path", c.Path, "pid", p.pid, "protocol", client.NegotiatedVersion())
	return p, nil
}

// launchError explains a failed start, with the plugin's last complaints.
func launchError(name string, c *Candidate, err error, stderr string) error {
	msg := err.Error()
	var hint string
	switch {
	case errors.Is(err, plugin.ErrChecksumsDoNotMatch) || strings.Contains(msg, "checksums did not match"):
		hint = "the binary's SHA-256 differs from the manifest's sha256: it changed since it was checked; reinstall it or update the manifest"
	case strings.Contains(msg, "Unrecognized remote plugin message"):
		hint = "it printed something other than the go-plugin handshake on stdout: either it is not a specula plugin, or it writes to stdout before serving (plugins must log to stderr)"
	case strings.Contains(msg, "incompatible API version"):
		hint = fmt.Sprintf("it speaks another plugin protocol version than this host (%d); install a build of the plugin for this specula version", sdk.ProtocolVersion)
	case strings.Contains(msg, "incompatible core API"):
		hint = "it was built with an incompatible go-plugin; rebuild it with the specula SDK"
	case strings.Contains(msg, "exited before we could connect"):
		hint = "it exited during start-up; is it a specula plugin built with the SDK?"
	case strings.Contains(msg, "timeout while waiting"):
		hint = "it did not complete the handshake in time"
	}
	// go-plugin appends a generic checklist to some errors; the first line
	// and our hint say more.
	first, _, _ := strings.Cut(strings.TrimSpace(msg), "\n")
	out := fmt.Sprintf("plugin %s (%s) failed to start: %s", name, c.Path, first)
	if hint != "" {
		out += " — " + hint
	}
	if stderr != "" {
		out += " (plugin said: " + stderr + ")"
	}
	return errors.New(out)
}

// describe calls Describe and checks the answer against the file name: the
// plugin's name, version, protocol and API version must match, and it must
// serve at least one draft architecture.
func (h *Host) describe(p *process, c *Candidate) (*draftv1.DescribeResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Timeouts.Describe)
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
