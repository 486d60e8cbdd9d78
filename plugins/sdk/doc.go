// Package sdk lets an architecture author ship a draft as a specula plugin
// binary (spec/plugins.md). main is a few lines: describe the plugin and call
// Serve.
//
//	func main() {
//		sdk.Serve(sdk.Plugin{
//			Name:          "acme-dflash3",
//			Version:       "1.2.0",
//			Architectures: []sdk.Architecture{sdk.BlockDraft("AcmeDraft", acme.New)},
//		})
//	}
//
// BlockDraft wraps a model.BlockDraft constructor: the SDK loads its weights
// and serves the draft session protocol with the speculation package's own
// BlockDrafter, so a plugin behaves exactly as a built-in draft. TokenDraft
// wraps a token-level Proposer (prompt lookup, n-gram tables) that needs no
// MLX model. The host keeps sampling, verification and acceptance, so output
// stays exact whatever a plugin proposes.
//
// Serve speaks go-plugin over gRPC with specula's handshake (MagicCookieKey,
// ProtocolVersion), raised message limits, AutoMTLS when the host asks for
// it, a guarded stdout, JSON logs on stderr, clean shutdown on SIGTERM or
// SIGINT and when the host dies. Package conformance tests a plugin's
// architectures with `go test`.
package sdk
