package sdk

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/plugins/proto/draftv1"
)

// loaded is a draft after Load: it answers Load's questions and opens
// sessions.
type loaded interface {
	response() *draftv1.LoadResponse
	open() (session, error)
	free()
}

// session is one request's draft state in the plugin. Calls are sequential.
type session interface {
	committed(position int64, tokens []int32, features *draftv1.Tensor) (frontier int64, err error)
	settle() (ctxOffset int64, err error)
	propose(req *draftv1.ProposeRequest) (*draftv1.ProposeResponse, error)
	close() error
}

// Server implements the draft service for a Plugin. sdk.Serve runs one in a
// plugin process; the conformance kit runs one in process.
type Server struct {
	draftv1.UnimplementedDraftServer

	p   Plugin
	log *slog.Logger

	mu       sync.Mutex
	draft    loaded // nil before Load
	sessions map[uint64]*sessionEntry
	nextID   uint64
}

type sessionEntry struct {
	mu sync.Mutex // calls for one session are sequential; this enforces it
	s  session
}

// NewServer checks p and returns a server for it; log (nil: slog.Default())
// receives the server's records.
func NewServer(p Plugin, log *slog.Logger) (*Server, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Server{p: p, log: log, sessions: map[uint64]*sessionEntry{}}, nil
}

// Describe reports the plugin's version, protocol and architectures.
func (s *Server) Describe(_ context.Context, req *draftv1.DescribeRequest) (*draftv1.DescribeResponse, error) {
	s.log.Debug("describe", "host_version", req.GetHostVersion(), "protocol_versions", req.GetProtocolVersions())
	return s.p.describe(), nil
}

// Load builds and loads the draft on the MLX worker. A process serves one
// loaded draft: a second Load fails.
func (s *Server) Load(ctx context.Context, req *draftv1.LoadRequest) (*draftv1.LoadResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draft != nil {
		return nil, status.Error(codes.FailedPrecondition, "a draft is already loaded; a plugin process serves one loaded draft")
	}
	var arch *Architecture
	for i := range s.p.Architectures {
		if s.p.Architectures[i].Name == req.GetArchitecture() {
			arch = &s.p.Architectures[i]
		}
	}
	if arch == nil {
		return nil, status.Errorf(codes.NotFound, "plugin %s does not serve architecture %q (it serves %s)", s.p.Name, req.GetArchitecture(), s.p.archNames())
	}
	cfg, err := loadConfig(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	d, err := arch.load(ctx, cfg)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "loading %s from %s: %v", arch.Name, cfg.CheckpointDir, err)
	}
	if t, ok := d.(*tokenLoaded); ok {
		t.log = s.log
	}
	if cfg.CheckOnly {
		resp := d.response()
		d.free()
		s.log.Info("draft checked", "architecture", arch.Name, "dir", cfg.CheckpointDir)
		return resp, nil
	}
	s.draft = d
	resp := d.response()
	s.log.Info("draft loaded", "architecture", arch.Name, "dir", cfg.CheckpointDir, "block_size", resp.BlockSize, "max_depth", resp.MaxDepth, "needs_features", resp.NeedsFeatures)
	return resp, nil
}

func loadConfig(req *draftv1.LoadRequest) (*LoadConfig, error) {
	dt := mlx.Float32
	if req.GetDtype() != "" {
		var err error
		if dt, err = mlx.ParseDType(req.GetDtype()); err != nil {
			return nil, fmt.Errorf("load dtype: %v", err)
		}
	}
	t := req.GetTarget()
	cfg := &LoadConfig{
		Architecture:  req.GetArchitecture(),
		CheckpointDir: req.GetCheckpointDir(),
		ConfigJSON:    req.GetConfigJson(),
		DType:         dt,
		Device:        req.GetDevice(),
		CheckOnly:     req.GetCheckOnly(),
		Target: TargetInfo{
			Architecture: t.GetArchitecture(),
			HiddenSize:   int(t.GetHiddenSize()),
			VocabSize:    int(t.GetVocabSize()),
			NumLayers:    int(t.GetNumLayers()),
		},
	}
	for _, l := range t.GetTensors() {
		loc := TensorLocation{Name: l.GetName(), Role: l.GetRole(), File: l.GetFile(), Offset: l.GetOffset(), Size: l.GetLength(), DType: l.GetDtype()}
		for _, d := range l.GetShape() {
			loc.Shape = append(loc.Shape, int(d))
		}
		cfg.Target.Tensors = append(cfg.Target.Tensors, loc)
	}
	return cfg, nil
}

// Open starts a session.
func (s *Server) Open(_ context.Context, req *draftv1.OpenRequest) (*draftv1.OpenResponse, error) {
	if req.GetStartOffset() != 0 {
		return nil, status.Errorf(codes.Unimplemented, "start_offset %d: restored prefixes are not supported by SDK %s", req.GetStartOffset(), Version)
	}
	s.mu.Lock()
	d := s.draft
	s.mu.Unlock()
	if d == nil {
		return nil, status.Error(codes.FailedPrecondition, "Open before Load")
	}
	sess, err := d.open()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "opening a session: %v", err)
	}
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.sessions[id] = &sessionEntry{s: sess}
	s.mu.Unlock()
	s.log.Debug("session opened", "session", id, "request", req.GetRequestId())
	return &draftv1.OpenResponse{SessionId: id}, nil
}

// session finds a session and locks it; the caller unlocks.
func (s *Server) session(id uint64) (*sessionEntry, error) {
	s.mu.Lock()
	e := s.sessions[id]
	s.mu.Unlock()
	if e == nil {
		return nil, status.Errorf(codes.NotFound, "no session %d (never opened, or closed)", id)
	}
	e.mu.Lock()
	return e, nil
}

// Committed reports a run of tokens (and features).
func (s *Server) Committed(_ context.Context, req *draftv1.CommittedRequest) (*draftv1.CommittedResponse, error) {
	e, err := s.session(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	defer e.mu.Unlock()
	f, err := e.s.committed(req.GetPosition(), req.GetTokens(), req.GetFeatures())
	if err != nil {
		return nil, asStatus(err)
	}
	return &draftv1.CommittedResponse{Frontier: f}, nil
}

// Settle writes buffered reports.
func (s *Server) Settle(_ context.Context, req *draftv1.SettleRequest) (*draftv1.SettleResponse, error) {
	e, err := s.session(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	defer e.mu.Unlock()
	off, err := e.s.settle()
	if err != nil {
		return nil, asStatus(err)
	}
	return &draftv1.SettleResponse{CtxOffset: off}, nil
}

// Propose drafts tokens after the anchor, or declines with no tokens.
func (s *Server) Propose(_ context.Context, req *draftv1.ProposeRequest) (*draftv1.ProposeResponse, error) {
	e, err := s.session(req.GetSessionId())
	if err != nil {
		return nil, err
	}
	defer e.mu.Unlock()
	resp, err := e.s.propose(req)
	if err != nil {
		return nil, asStatus(err)
	}
	return resp, nil
}

// Close settles and ends a session; closing an unknown session is a no-op.
func (s *Server) Close(_ context.Context, req *draftv1.CloseRequest) (*draftv1.CloseResponse, error) {
	s.mu.Lock()
	e := s.sessions[req.GetSessionId()]
	delete(s.sessions, req.GetSessionId())
	s.mu.Unlock()
	if e == nil {
		return &draftv1.CloseResponse{}, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.s.close(); err != nil {
		return nil, asStatus(err)
	}
	s.log.Debug("session closed", "session", req.GetSessionId())
	return &draftv1.CloseResponse{}, nil
}

// shutdown closes every session and frees the draft (clean exit).
func (s *Server) shutdown() {
	s.mu.Lock()
	sessions := s.sessions
	s.sessions = map[uint64]*sessionEntry{}
	d := s.draft
	s.draft = nil
	s.mu.Unlock()
	for _, e := range sessions {
		_ = e.s.close()
	}
	if d != nil {
		d.free()
	}
}

// protoErr is a protocol misuse by the host: InvalidArgument.
type protoErr struct{ msg string }

func (e *protoErr) Error() string { return e.msg }

func protoErrorf(format string, args ...any) error {
	return &protoErr{msg: fmt.Sprintf(format, args...)}
}

func asStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if pe, ok := err.(*protoErr); ok {
		return status.Error(codes.InvalidArgument, pe.msg)
	}
	return status.Error(codes.Internal, err.Error())
}

// safeDo runs fn on the MLX worker, turning a panic into an error.
func safeDo(ctx context.Context, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return mlx.Do(ctx, func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return fn()
	})
}

// Plugin describes what a plugin binary serves.
type Plugin struct {
	// Name is the plugin's name: the <name> of its file name
	// specula-plugin-<name>_v<version>_x1.0_<os>_<arch>, and what manifests
	// write as [draft] plugin.
	Name string
	// Version is the plugin's semantic version (no leading v); it must equal
	// the version in the file name.
	Version string
	// Architectures are the architectures the plugin serves.
	Architectures []Architecture
	// Setup, if set, runs once before the handshake (initialise a device,
	// read a config); an error ends the plugin with that message. The SDK's
	// stdout guard is active: anything written to stdout fails the start.
	Setup func() error
	// Wrap, if set, wraps the protocol server before it is served: for
	// instrumentation, and for tests that inject faults.
	Wrap func(draftv1.DraftServer) draftv1.DraftServer
}

func (p *Plugin) validate() error {
	if p.Name == "" {
		return fmt.Errorf("sdk: Plugin.Name is empty")
	}
	if !validVersion(p.Version) {
		return fmt.Errorf("sdk: plugin %s: Version %q is not a semantic version like 1.2.0 (no leading v)", p.Name, p.Version)
	}
	if len(p.Architectures) == 0 {
		return fmt.Errorf("sdk: plugin %s serves no architectures", p.Name)
	}
	seen := map[string]bool{}
	for _, a := range p.Architectures {
		if a.Name == "" || a.load == nil {
			return fmt.Errorf("sdk: plugin %s: an architecture has no name or was not built with sdk.BlockDraft or sdk.TokenDraft", p.Name)
		}
		if seen[a.Name] {
			return fmt.Errorf("sdk: plugin %s lists architecture %s twice", p.Name, a.Name)
		}
		seen[a.Name] = true
		if !a.Capabilities.Contains(model.CapDraft) {
			return fmt.Errorf("sdk: plugin %s: architecture %s does not declare %q", p.Name, a.Name, model.CapDraft)
		}
	}
	return nil
}

func (p *Plugin) archNames() string {
	var names []string
	for _, a := range p.Architectures {
		names = append(names, a.Name)
	}
	slices.Sort(names)
	return fmt.Sprint(names)
}

func (p *Plugin) describe() *draftv1.DescribeResponse {
	r := &draftv1.DescribeResponse{Name: p.Name, PluginVersion: p.Version, ProtocolVersion: ProtocolVersion, SdkVersion: Version}
	for _, a := range p.Architectures {
		pa := &draftv1.Architecture{Name: a.Name, NeedsFeatures: a.NeedsFeatures}
		for _, c := range a.Capabilities {
			pa.Capabilities = append(pa.Capabilities, string(c))
		}
		r.Architectures = append(r.Architectures, pa)
	}
	return r
}
