// Package plugins is specula's plugin host (spec/plugins.md): it finds
// plugin binaries, checks them (file names, _SHA256SUM files, permissions,
// the manifest's sha256 before exec), launches them with hashicorp/go-plugin
// over gRPC (specula's handshake, versioned protocols, AutoMTLS, raised
// message limits, an explicit environment, a short socket folder), files
// their stderr in the host's structured log, and registers the architectures
// their Describe declares.
//
// A registered architecture builds a *Draft, the host-side proxy. Its
// NewDrafter (speculation.DrafterFactory) sends Load and returns a *Drafter
// whose sessions speak the draft session protocol across the process
// boundary: deferred, chunked Committed runs, Settle, Propose and Close.
// Every proposal is validated before the host verifies it; a crash, a missed
// deadline or an invalid answer makes the session decline for the rest of
// the request (speculation.Faulted: "plugin-crash", "plugin-timeout",
// "plugin-invalid"), and a crashed or hung process is restarted at the next
// request's Open, at most three times in five minutes. Output stays exact:
// the host keeps sampling, verification and acceptance.
package plugins
