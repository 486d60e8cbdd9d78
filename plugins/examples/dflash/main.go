// Command specula-plugin-dflash serves the built-in DFlash draft
// architecture out of process: the same arch/dflash code, loaded by the SDK
// in a plugin binary. It exists to exercise the plugin path on a real draft
// and to measure its cost against the in-process draft.
//
// A manifest uses it like the built-in DFlash, plus the plugin's name and
// checksum:
//
//	[draft]
//	path = "models/Qwen3.5-4B-DFlash"
//	architecture = "DFlashDraftModel"
//	capabilities = ["draft", "block-draft"]
//	plugin = "dflash"
//	sha256 = "<the digest in its _SHA256SUM file>"
//
// specula links the built-in DFlashDraftModel too: the plugin's entry is
// registered beside it under its plugin-qualified name (registry.LookupPlugin),
// so a manifest naming plugin = "dflash" gets the out-of-process draft and
// one without plugin gets the built-in. Its test checks that both produce
// the same tokens and acceptance.
package main

import (
	"github.com/specula-dev/specula/arch/dflash"
	"github.com/specula-dev/specula/plugins/sdk"
	"github.com/specula-dev/specula/registry"
)

// version is the plugin's version; `make plugins` puts it in the file name.
const version = "0.1.0"

func main() { sdk.Serve(Plugin()) }

// Plugin describes the plugin.
func Plugin() sdk.Plugin {
	return sdk.Plugin{
		Name:          "dflash",
		Version:       version,
		Architectures: []sdk.Architecture{sdk.BlockDraft(dflash.ArchName, newDraft)},
	}
}

// newDraft builds the DFlash draft from the checkpoint's config.json, as the
// registry constructor does in process.
func newDraft(cfg *sdk.LoadConfig) (*dflash.Draft, error) {
	return dflash.New(registry.Config{Dir: cfg.CheckpointDir, JSON: cfg.ConfigJSON, DType: cfg.DType})
}
