package sdk

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/specula-dev/specula/plugins/proto/draftv1"
)

// The handshake every specula plugin and host share (spec/plugins.md
// section 2). The cookie is a usability guard — it lets a plugin binary
// started by hand say what it is — not a security measure.
const (
	// MagicCookieKey is the environment variable the host sets.
	MagicCookieKey = "SPECULA_PLUGIN"
	// MagicCookieValue is its value: a fixed random constant.
	MagicCookieValue = "5f0c9a27d1e84b63a0f2c7e91b4d8a36"
	// ProtocolVersion is the wire protocol this SDK serves
	// (specula.plugin.draft.v1). A breaking protocol change adds version 2
	// alongside 1 in the versioned plugin sets.
	ProtocolVersion = 1
	// PluginKey names the draft service in the plugin sets.
	PluginKey = "draft"
	// APIMajor and APIMinor are the plugin API version that file names carry
	// as x<major>.<minor>.
	APIMajor, APIMinor = 1, 0
	// Version is this SDK's version, reported by Describe.
	Version = "0.1.0"
	// MaxMessageSize bounds gRPC messages in both directions on both sides
	// (the default 4 MiB receive limit breaks feature-heavy Committed calls).
	MaxMessageSize = 64 << 20
)

// Handshake returns the go-plugin handshake configuration.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   MagicCookieKey,
		MagicCookieValue: MagicCookieValue,
	}
}

// ClientPlugins returns the versioned plugin sets a host offers: version 1
// dispenses a draftv1.DraftClient.
func ClientPlugins() map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{ProtocolVersion: {PluginKey: &DraftPlugin{}}}
}

// ServerPlugins returns the versioned plugin sets serving srv.
func ServerPlugins(srv draftv1.DraftServer) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{ProtocolVersion: {PluginKey: &DraftPlugin{Impl: srv}}}
}

// DraftPlugin is the go-plugin glue of the draft service: the plugin side
// registers Impl, the host side dispenses a draftv1.DraftClient. It
// supports gRPC only.
type DraftPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl implements the service (plugin side only).
	Impl draftv1.DraftServer
}

var _ plugin.GRPCPlugin = (*DraftPlugin)(nil)

// GRPCServer registers the draft service.
func (p *DraftPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("sdk: DraftPlugin has no Impl")
	}
	draftv1.RegisterDraftServer(s, p.Impl)
	return nil
}

// GRPCClient returns a draftv1.DraftClient over the plugin's connection.
func (p *DraftPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return draftv1.NewDraftClient(c), nil
}

// NewGRPCServer builds the plugin's gRPC server with the raised message
// limits; go-plugin passes opts (TLS for AutoMTLS).
func NewGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize))
	return grpc.NewServer(opts...)
}
