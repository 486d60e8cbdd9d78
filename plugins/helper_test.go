package plugins_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/specula-dev/specula/cache"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/plugins"
	"github.com/specula-dev/specula/plugins/internal/wire"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/plugins/sdk"
	"github.com/specula-dev/specula/plugins/sdk/conformance"
)

// The test binary is also the helper plugin: the host starts it with
// SPECULA_TEST_HELPER_PLUGIN=1 in its (explicit) environment, and
// SPECULA_TEST_HELPER_MODE picks a fault.
const (
	envHelper = "SPECULA_TEST_HELPER_PLUGIN"
	envMode   = "SPECULA_TEST_HELPER_MODE"
	// envPIDFile names a file the helper writes its pid to (mode
	// nohandshake).
	envPIDFile = "SPECULA_TEST_HELPER_PIDFILE"
)

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) == "1" {
		helperMain(os.Getenv(envMode))
		os.Exit(0)
	}
	code := m.Run()
	plugins.CleanupClients()
	os.Exit(code)
}

// targetSpec is the fake target every test pairs drafts with.
var targetSpec = conformance.Target{Vocab: 16, Hidden: 8, Layers: 4, Seed: 7}

// chainDraft is a block draft over the fake target's vocabulary: row i of a
// block predicts its predecessor's successor in a table that agrees with the
// target's greedy chain except after multiples of 4. It ignores feature
// values but writes one cache row per context row, as a real draft does.
type chainDraft struct {
	succ      []int32
	blockSize int
}

func newChainDraft(blockSize int) *chainDraft {
	t := conformance.NewFakeTarget(targetSpec)
	d := &chainDraft{blockSize: blockSize, succ: make([]int32, targetSpec.Vocab)}
	for id := range d.succ {
		d.succ[id] = t.GreedyNext(int32(id))
		if id%4 == 0 {
			d.succ[id] = (d.succ[id] + 1) % int32(targetSpec.Vocab)
		}
	}
	return d
}

func (d *chainDraft) LoadWeights(map[string]*mlx.Array) error { return nil }
func (d *chainDraft) NewCaches() []cache.Cache                { return []cache.Cache{&conformance.RecordingCache{}} }
func (d *chainDraft) BlockParams() (int, int32)               { return d.blockSize, 15 }
func (d *chainDraft) Unembed(h *mlx.Array) *mlx.Array         { return h }
func (d *chainDraft) Forward(b *model.Batch, _, dc []cache.Cache) (*mlx.Array, *mlx.Array) {
	rc := dc[0].(*conformance.RecordingCache)
	if b.Hidden != nil {
		rc.Feed(make([]int32, b.Hidden.Dim(1))...)
	}
	if b.InputIDs == nil {
		return nil, nil
	}
	block, err := b.InputIDs.Int32s()
	if err != nil {
		panic(err)
	}
	rc.Feed(block...)
	v := targetSpec.Vocab
	logits := make([]float32, len(block)*v)
	pred := block[0]
	for i := 1; i < len(block); i++ {
		pred = d.succ[pred]
		logits[i*v+int(pred)] = 30
	}
	h := mlx.FromFloat32s(logits, 1, len(block), v)
	return h, h
}

// chainSelector adds a selector whose candidates are [unary, unary+1] with
// scores preferring the unary winner.
type chainSelector struct{ *chainDraft }

func (d *chainSelector) Select(_, logits, _ *mlx.Array, choose model.ChooseFunc) (tokens, ids, probs *mlx.Array) {
	n := logits.Dim(1)
	unary := mlx.AsType(mlx.Reshape(mlx.Argmax(logits, -1, false), n, 1), mlx.Int32)
	other := mlx.Remainder(mlx.Add(unary, mlx.Scalar(1, mlx.Int32)), mlx.Scalar(float64(targetSpec.Vocab), mlx.Int32))
	ids = mlx.Concatenate(1, unary, other)
	scores := mlx.BroadcastTo(mlx.FromFloat32s([]float32{2, 0}, 1, 2), n, 2)
	tokens, probs = choose(ids, scores)
	return mlx.Reshape(tokens, 1, n), mlx.Reshape(ids, 1, n, 2), mlx.Reshape(probs, 1, n, 2)
}

var (
	_ model.BlockDraft = (*chainDraft)(nil)
	_ model.Selector   = (*chainSelector)(nil)
)

// helperPlugin is the plugin the helper serves: a plain block draft and a
// selector draft, with the fault of mode.
func helperPlugin(mode string) sdk.Plugin {
	p := sdk.Plugin{
		Name:    "helper",
		Version: "1.0.0",
		Architectures: []sdk.Architecture{
			sdk.BlockDraft("ChainDraft", func(*sdk.LoadConfig) (*chainDraft, error) { return newChainDraft(5), nil }),
			sdk.BlockDraft("ChainSelector", func(*sdk.LoadConfig) (*chainSelector, error) { return &chainSelector{newChainDraft(5)}, nil }),
		},
	}
	if mode != "" {
		p.Wrap = func(s draftv1.DraftServer) draftv1.DraftServer { return &faulty{DraftServer: s, mode: mode} }
	}
	if mode == "stdout" {
		p.Setup = func() error {
			fmt.Println("loading the frobnicator")
			return nil
		}
	}
	return p
}

// faulty injects the fault of mode into a draft server: from the second
// proposal on for crash and hang (so that drafting has begun), on every
// proposal for garbage.
type faulty struct {
	draftv1.DraftServer
	mode      string
	proposals int
}

func (f *faulty) Describe(ctx context.Context, r *draftv1.DescribeRequest) (*draftv1.DescribeResponse, error) {
	d, err := f.DraftServer.Describe(ctx, r)
	if f.mode == "describe" && err == nil {
		d.PluginVersion = "9.9.9"
	}
	return d, err
}

func (f *faulty) Propose(ctx context.Context, r *draftv1.ProposeRequest) (*draftv1.ProposeResponse, error) {
	f.proposals++
	resp, err := f.DraftServer.Propose(ctx, r)
	if err != nil || len(resp.Tokens) == 0 {
		return resp, err
	}
	probs := wire.BytesFloat32(resp.Dist.Probs)
	switch f.mode {
	case "crash":
		if f.proposals >= 2 {
			os.Exit(3)
		}
	case "hang":
		if f.proposals >= 2 {
			time.Sleep(time.Hour)
		}
	case "stop":
		if f.proposals >= 2 {
			// Frozen, as by a debugger or a user's kill -STOP: it answers
			// nothing, not even go-plugin's graceful Shutdown.
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
	case "panic":
		if f.proposals >= 2 {
			panic("helper: the frobnicator overflowed")
		}
	case "nan":
		probs[0] = float32(math.NaN())
	case "negative":
		probs[0] = -0.5
	case "wronglen":
		resp.Tokens = append(resp.Tokens, resp.Tokens[0])
	case "outside":
		resp.Tokens[0] = int32(targetSpec.Vocab + 3)
	case "chatty":
		if f.proposals == 1 {
			// An author's debugging output, after the handshake.
			fmt.Println("chatty: the frobnicator says hello")
			fmt.Fprintln(os.Stderr, "chatty: the frobnicator is warm")
		}
	}
	resp.Dist.Probs = wire.Float32Bytes(probs)
	return resp, nil
}

// helperMain runs the test binary as the helper plugin.
func helperMain(mode string) {
	switch mode {
	case "notplugin":
		fmt.Println("hello, I am not a plugin")
		return
	case "silent":
		// Exits at once, printing nothing.
		os.Exit(3)
	case "nohandshake":
		// Never completes the handshake (a binary that is not a plugin,
		// say `sleep 300`); it tells the test its pid first.
		if f := os.Getenv(envPIDFile); f != "" {
			_ = os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644)
		}
		time.Sleep(time.Hour)
	case "protocol":
		// A plugin built for a future protocol version only.
		p := helperPlugin("")
		srv, err := sdk.NewServer(p, nil)
		if err != nil {
			panic(err)
		}
		plugin.Serve(&plugin.ServeConfig{
			HandshakeConfig:  sdk.Handshake(),
			VersionedPlugins: map[int]plugin.PluginSet{2: {sdk.PluginKey: &sdk.DraftPlugin{Impl: srv}}},
			GRPCServer:       sdk.NewGRPCServer,
		})
		return
	}
	sdk.Serve(helperPlugin(mode))
}

// helperInstall links the test binary into a fresh plugin folder under the
// helper's file name, with its _SHA256SUM, and returns the folder and digest.
func helperInstall(t testing.TB) (dir, digest string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	name := sdk.FileName{Name: "helper", Version: "1.0.0", APIMajor: 1, APIMinor: 0, OS: runtime.GOOS, Arch: runtime.GOARCH}.String()
	if err := os.Symlink(exe, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	digest = hex.EncodeToString(h.Sum(nil))
	if err := os.WriteFile(filepath.Join(dir, name+sdk.ChecksumSuffix), []byte(digest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, digest
}

// checkpoint makes a draft checkpoint folder holding config.json.
func checkpoint(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures": ["ChainDraft"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
