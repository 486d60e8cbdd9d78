package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/specula-dev/specula/plugins"
)

func init() {
	register(&command{name: "plugins", summary: "list the plugin binaries found on the plugin search path", run: runPlugins})
}

// pluginJSON is one plugin in `specula plugins --json`.
type pluginJSON struct {
	Name          string           `json:"name"`
	Version       string           `json:"version"`
	Protocol      int              `json:"protocol,omitempty"`
	API           string           `json:"api"`
	Platform      string           `json:"platform"`
	Path          string           `json:"path"`
	SHA256        string           `json:"sha256,omitempty"`
	Architectures []pluginArchJSON `json:"architectures"`
	Status        string           `json:"status"`
}

type pluginArchJSON struct {
	Name          string   `json:"name"`
	Capabilities  []string `json:"capabilities"`
	NeedsFeatures bool     `json:"needs_features"`
}

func runPlugins(e *env, args []string) int {
	fs := newFlags(e, "plugins", "[--plugin-dir D]... [--json]")
	var dirs []string
	pluginDirFlag(fs, func(dir string) { dirs = append(dirs, dir) })
	// --dir is the flag's earlier name, kept so existing scripts work.
	dir := fs.String("dir", "", "the same as --plugin-dir (older name)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := noArguments(e, fs, pos); !ok {
		return code
	}
	if *dir != "" {
		dirs = append(dirs, *dir)
	}
	path := plugins.SearchPath(dirs...)
	list, err := plugins.List(e.ctx, path)
	if err != nil {
		return fail(e, "plugins", err)
	}
	out := make([]pluginJSON, 0, len(list))
	for _, l := range list {
		p := pluginJSON{Name: l.File.Name, Version: l.File.Version, API: fmt.Sprintf("x%d.%d", l.File.APIMajor, l.File.APIMinor),
			Platform: l.File.OS + "_" + l.File.Arch, Path: l.Path, SHA256: l.Digest, Status: l.Status, Architectures: []pluginArchJSON{}}
		if d := l.Description; d != nil {
			p.Protocol = d.ProtocolVersion
			for _, a := range d.Architectures {
				p.Architectures = append(p.Architectures, pluginArchJSON{Name: a.Name, Capabilities: a.Capabilities, NeedsFeatures: a.NeedsFeatures})
			}
		}
		out = append(out, p)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fail(e, "plugins", err)
		}
		return exitOK
	}
	if len(out) == 0 {
		fmt.Fprintf(e.stdout, "no plugins found in %s\n", strings.Join(path, ":"))
		return exitOK
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tVERSION\tPROTOCOL\tSHA256\tARCHITECTURES\tSTATUS")
	for _, p := range out {
		var archs []string
		for _, a := range p.Architectures {
			archs = append(archs, fmt.Sprintf("%s [%s]", a.Name, strings.Join(a.Capabilities, ", ")))
		}
		proto := "-"
		if p.Protocol > 0 {
			proto = fmt.Sprint(p.Protocol)
		}
		sum := p.SHA256
		if len(sum) > 16 {
			sum = sum[:16] + "…"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Version, proto, sum, pluginsOrDash(strings.Join(archs, "; ")), p.Status)
	}
	if err := w.Flush(); err != nil {
		return fail(e, "plugins", err)
	}
	return exitOK
}

func pluginsOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
