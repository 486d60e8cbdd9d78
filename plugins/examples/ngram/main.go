// Command specula-plugin-ngram is an example specula draft plugin: a
// prompt-lookup drafter with no weights. It proposes what followed the
// latest earlier occurrence of the context's last n tokens (n = max_ngram
// down to 1), which pays off on repetitive text (code, quotes, lists).
//
// Build it with `make plugins`; a manifest uses it with
//
//	[draft]
//	path = "ngram"                 # a folder holding config.json
//	architecture = "NgramDraft"
//	capabilities = ["draft", "block-draft"]
//	weights = false                # prompt lookup has no weights
//	plugin = "ngram"
//	sha256 = "<the digest in its _SHA256SUM file>"
//
// config.json may set max_ngram and min_ngram ({} keeps the defaults).
package main

import "github.com/specula-dev/specula/plugins/sdk"

// version is the plugin's version; `make plugins` puts it in the file name.
const version = "0.1.0"

func main() { sdk.Serve(Plugin()) }

// Plugin describes the plugin.
func Plugin() sdk.Plugin {
	return sdk.Plugin{
		Name:          "ngram",
		Version:       version,
		Architectures: []sdk.Architecture{sdk.TokenDraft("NgramDraft", maxDepth, newProposer)},
	}
}
