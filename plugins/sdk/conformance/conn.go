package conformance

import (
	"testing"

	"github.com/hashicorp/go-plugin"

	"github.com/specula-dev/specula/plugins/proto/draftv1"
	"github.com/specula-dev/specula/plugins/sdk"
)

// Serve serves p with the SDK's server over a real in-process gRPC
// connection (go-plugin's test connection, without multiplexing) and
// returns the host's end. Both ends close when the test ends.
func Serve(t testing.TB, p sdk.Plugin) draftv1.DraftClient {
	t.Helper()
	srv, err := sdk.NewServer(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	var impl draftv1.DraftServer = srv
	if p.Wrap != nil {
		impl = p.Wrap(srv)
	}
	return ServeServer(t, impl)
}

// ServeServer is Serve for any draft server (a wrapped one, in tests that
// inject faults).
func ServeServer(t testing.TB, srv draftv1.DraftServer) draftv1.DraftClient {
	t.Helper()
	client, server := testConn(t, plugin.PluginSet{sdk.PluginKey: &sdk.DraftPlugin{Impl: srv}})
	t.Cleanup(func() {
		_ = client.Close()
		server.Stop()
	})
	raw, err := client.Dispense(sdk.PluginKey)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(draftv1.DraftClient)
}

// testConn wraps go-plugin's TestPluginGRPCConn, whose signature changed in
// v1.6.0 (multiplex was added); the module pins go-plugin, and this is the
// one place that knows the signature.
func testConn(t testing.TB, ps plugin.PluginSet) (*plugin.GRPCClient, *plugin.GRPCServer) {
	return plugin.TestPluginGRPCConn(t, false, ps)
}
