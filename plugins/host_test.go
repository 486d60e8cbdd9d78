package plugins_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/mlx/mlxtest"
	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/sample"
	"github.com/specula-dev/specula/speculation"
)

// startHelper loads the helper plugin (with a fault mode) into a fresh
// registry through the normal client path: discovery, checksum, cookie,
// AutoMTLS, Describe.
func startHelper(t *testing.T, mode string, timeouts plugins.Timeouts) (*plugins.Host, *registry.Registry, error) {
	t.Helper()
	dir, digest := helperInstall(t)
	h := plugins.NewHost(plugins.Config{
		Dirs:     []string{dir},
		Env:      []string{envHelper + "=1", envMode + "=" + mode},
		Timeouts: timeouts,
		Logger:   slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	t.Cleanup(h.Close)
	reg := registry.New()
	return h, reg, h.LoadPlugin(context.Background(), "helper", digest, reg)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// drafter builds arch's proxy from the registry and loads it for target.
func drafter(t *testing.T, reg *registry.Registry, arch string, target *conformanceTarget) *plugins.Drafter {
	t.Helper()
	v, e, err := reg.Build(arch, registry.Config{Dir: checkpoint(t), JSON: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	if e.Source != registry.PluginSource("helper") {
		t.Fatalf("entry source %q, want %q", e.Source, registry.PluginSource("helper"))
	}
	f, ok := v.(speculation.DrafterFactory)
	if !ok {
		t.Fatalf("the registry built a %T, not a speculation.DrafterFactory", v)
	}
	d, err := f.NewDrafter(target, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d.(*plugins.Drafter)
}

// generate decodes one greedy request with drafter (nil: plain decoding).
func generate(t *testing.T, target *conformanceTarget, drafter speculation.Drafter, prompt []int32, budget int) (speculation.Result, speculation.Stats) {
	t.Helper()
	var res speculation.Result
	var st speculation.Stats
	mlxtest.Run(t, func(t *mlxtest.T) {
		caches := target.NewCaches()
		cfg := speculation.Config{Target: target, TargetCaches: caches, SelectorDepth: 4}
		if drafter != nil {
			cfg.Drafter = drafter
		}
		core := speculation.NewCore(cfg)
		s := core.Open(speculation.Request{Sampler: sample.New(sample.Options{}, prompt)})
		seed, pos, err := s.Prefill(context.Background(), prompt)
		t.NoErr(err)
		d := s.Decoder(seed, pos)
		res, err = speculation.Run(context.Background(), d, budget, func(int32) error { return nil })
		t.NoErr(err)
		d.Close()
		s.Close()
		st = *s.Stats()
	})
	return res, st
}

var prompt = []int32{1, 5, 9, 2, 5, 9}

// alive reports whether process pid exists.
func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// waitGone waits for pid to end.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("plugin process %d is still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSubprocessGreedyEqualsPlain(t *testing.T) {
	h, reg, err := startHelper(t, "", plugins.Timeouts{})
	if err != nil {
		t.Fatal(err)
	}
	target := newTarget()
	want, _ := generate(t, target, nil, prompt, 40)
	for _, arch := range []string{"ChainSelector", "ChainDraft"} {
		t.Run(arch, func(t *testing.T) {
			d := drafter(t, reg, arch, target)
			got, st := generate(t, target, d, prompt, 40)
			if !slices.Equal(got.Tokens, want.Tokens) || got.Reason != want.Reason {
				t.Fatalf("through the plugin %v (%s), plain %v (%s)", got.Tokens, got.Reason, want.Tokens, want.Reason)
			}
			if arch == "ChainSelector" && (st.DraftRounds == 0 || st.Accepted == 0) {
				t.Fatalf("no accepted drafts at the fixed depth: %+v", st)
			}
			t.Logf("%s: %d rounds, %d drafted, %d accepted, fallbacks %v", arch, st.Iterations, st.Drafted, st.Accepted, st.Fallback)
			pid := d.PID()
			if !alive(pid) {
				t.Fatalf("plugin process %d is not running", pid)
			}
			d.Close()
			waitGone(t, pid)
		})
	}
	h.Close()
}

// TestSubprocessFaults: whatever the plugin does wrong mid-request, the
// request completes with the plain output, its stats name the fallback,
// and no plugin process survives.
func TestSubprocessFaults(t *testing.T) {
	target := newTarget()
	want, _ := generate(t, target, nil, prompt, 40)
	cases := []struct{ mode, reason string }{
		{"crash", plugins.FaultCrash},
		{"hang", plugins.FaultTimeout},
		{"nan", plugins.FaultInvalid},
		{"negative", plugins.FaultInvalid},
		{"wronglen", plugins.FaultInvalid},
		{"outside", plugins.FaultInvalid},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			h, reg, err := startHelper(t, c.mode, plugins.Timeouts{Propose: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			d := drafter(t, reg, "ChainSelector", target)
			pid := d.PID()
			got, st := generate(t, target, d, prompt, 40)
			if !slices.Equal(got.Tokens, want.Tokens) || got.Reason != want.Reason {
				t.Fatalf("with fault %s: %v (%s), plain %v (%s)", c.mode, got.Tokens, got.Reason, want.Tokens, want.Reason)
			}
			if st.Fallback[c.reason] == 0 {
				t.Fatalf("stats fallbacks %v do not name %s", st.Fallback, c.reason)
			}
			if c.reason != plugins.FaultInvalid {
				waitGone(t, pid) // crashed, or killed after the missed deadline
			}
			h.Close()
			waitGone(t, pid)
		})
	}
}

// TestSubprocessRestartBudget: a plugin that crashes in every request is
// restarted at the next request's Open at most three times; then the draft
// is disabled and requests decode plainly with reason plugin-crash.
func TestSubprocessRestartBudget(t *testing.T) {
	target := newTarget()
	want, _ := generate(t, target, nil, prompt, 24)
	h, reg, err := startHelper(t, "crash", plugins.Timeouts{})
	if err != nil {
		t.Fatal(err)
	}
	d := drafter(t, reg, "ChainSelector", target)
	pids := map[int]bool{}
	for i := range 5 {
		for _, pid := range h.PIDs() {
			pids[pid] = true
		}
		got, st := generate(t, target, d, prompt, 24)
		if !slices.Equal(got.Tokens, want.Tokens) {
			t.Fatalf("request %d: %v, plain %v", i, got.Tokens, want.Tokens)
		}
		if st.Fallback[plugins.FaultCrash] == 0 {
			t.Fatalf("request %d: fallbacks %v, want %s", i, st.Fallback, plugins.FaultCrash)
		}
	}
	if d.Restarts() != plugins.RestartBudget {
		t.Fatalf("%d restarts, want %d", d.Restarts(), plugins.RestartBudget)
	}
	for pid := range pids {
		waitGone(t, pid)
	}
}

// TestSubprocessStartFailures: a plugin that cannot be used is refused
// before anything runs through it, with a message that says why.
func TestSubprocessStartFailures(t *testing.T) {
	cases := []struct{ mode, want string }{
		{"describe", "reports version 9.9.9 but its file name says v1.0.0"},
		{"protocol", "speaks another plugin protocol version"},
		{"stdout", "wrote to stdout before its handshake"},
		{"notplugin", "not a specula plugin"},
		{"silent", "exited with status 3 before the handshake, printing nothing on stdout"},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			_, reg, err := startHelper(t, c.mode, plugins.Timeouts{})
			if err == nil {
				t.Fatal("the plugin loaded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
			if len(reg.Entries()) != 0 {
				t.Fatalf("registry has entries after a failed load: %v", reg.Entries())
			}
			t.Log(err)
		})
	}
}

func TestWrongChecksumRefused(t *testing.T) {
	dir, digest := helperInstall(t)
	h := plugins.NewHost(plugins.Config{Dirs: []string{dir}, Env: []string{envHelper + "=1"}})
	defer h.Close()
	wrong := strings.Repeat("0", 64)
	err := h.LoadPlugin(context.Background(), "helper", wrong, registry.New())
	if err == nil || !strings.Contains(err.Error(), "no binary of plugin helper has the manifest's sha256 "+wrong) || !strings.Contains(err.Error(), digest) {
		t.Fatalf("err = %v, want the candidates listed with their digests", err)
	}
}
