package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/specula-dev/specula/registry"
)

func init() {
	register(&command{name: "archs", summary: "list the registered architectures and their capabilities", run: runArchs})
}

// archJSON is one architecture in `specula archs --json`.
type archJSON struct {
	Name         string   `json:"name"`
	Aliases      []string `json:"aliases"`
	Kind         string   `json:"kind"`
	Capabilities []string `json:"capabilities"`
	Source       string   `json:"source"`
	Type         string   `json:"type,omitempty"`
}

// runArchs lists every architecture of registry.Default: targets first, then
// drafts, each with its aliases, capability record and source.
func runArchs(e *env, args []string) int {
	fs := newFlags(e, "archs", "[--json]")
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	rest, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	if code, ok := noArguments(e, fs, rest); !ok {
		return code
	}
	entries := registry.Default.Entries()
	if *asJSON {
		out := make([]archJSON, 0, len(entries))
		for _, en := range entries {
			caps := make([]string, len(en.Capabilities))
			for i, c := range en.Capabilities {
				caps[i] = string(c)
			}
			aliases := en.Aliases
			if aliases == nil {
				aliases = []string{}
			}
			out = append(out, archJSON{Name: en.Name, Aliases: aliases, Kind: string(en.Kind),
				Capabilities: caps, Source: en.Source, Type: en.Type})
		}
		return writeReportJSON(e, "archs", out)
	}
	if len(entries) == 0 {
		fmt.Fprintln(e.stdout, "no architectures are registered in this program")
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tCAPABILITIES\tSOURCE\tALIASES")
	for _, en := range entries {
		aliases := strings.Join(en.Aliases, ", ")
		if aliases == "" {
			aliases = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", en.Name, en.Kind, en.Capabilities, en.Source, aliases)
	}
	if err := tw.Flush(); err != nil {
		return fail(e, "archs", err)
	}
	return exitOK
}

// writeReportJSON prints v as indented JSON on stdout.
func writeReportJSON(e *env, cmd string, v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fail(e, cmd, err)
	}
	b = append(b, '\n')
	if _, err := e.stdout.Write(b); err != nil {
		return fail(e, cmd, err)
	}
	return exitOK
}
