package registry

import (
	"fmt"
	"strings"
)

// UnknownError reports a name no entry has (or, from LookupPlugin, that a
// plugin does not serve).
type UnknownError struct {
	// Name is the name that was looked up.
	Name string
	// Plugin is the plugin it was looked up in (LookupPlugin), or "".
	Plugin string
	// Known lists the registered names (not aliases), sorted; with Plugin,
	// the names that plugin serves.
	Known []string
}

func (e *UnknownError) Error() string {
	if e.Plugin != "" {
		if len(e.Known) == 0 {
			return fmt.Sprintf("plugin %s serves no architecture %q; it has no architectures registered", e.Plugin, e.Name)
		}
		return fmt.Sprintf("plugin %s serves no architecture %q; it serves: %s", e.Plugin, e.Name, strings.Join(e.Known, ", "))
	}
	if len(e.Known) == 0 {
		return fmt.Sprintf("unknown architecture %q; no architectures are registered", e.Name)
	}
	return fmt.Sprintf("unknown architecture %q; known: %s", e.Name, strings.Join(e.Known, ", "))
}

// InitError reports a known architecture whose constructor failed.
type InitError struct {
	// Name is the architecture's canonical name.
	Name string
	// Source is the entry's source (SourceBuiltin or "plugin <name>").
	Source string
	// Err is the constructor's error.
	Err error
}

func (e *InitError) Error() string {
	return fmt.Sprintf("architecture %s failed to initialise: %v", e.Name, e.Err)
}

// Unwrap returns the constructor's error.
func (e *InitError) Unwrap() error { return e.Err }

// DuplicateError reports a name or alias that another entry already has.
type DuplicateError struct {
	// Name is the contested name.
	Name string
	// Existing is the canonical name of the entry holding it.
	Existing string
	// Source is the holder's source.
	Source string
}

func (e *DuplicateError) Error() string {
	if e.Existing == e.Name {
		return fmt.Sprintf("registry: architecture name %q is already registered (%s)", e.Name, e.Source)
	}
	return fmt.Sprintf("registry: architecture name %q is already registered as an alias of %s (%s)", e.Name, e.Existing, e.Source)
}

// EntryError reports an entry that cannot be registered or removed as asked.
type EntryError struct {
	// Name is the entry's name ("" when the problem is not about one entry).
	Name string
	// Problem says what is wrong.
	Problem string
}

func (e *EntryError) Error() string {
	if e.Name == "" {
		return "registry: " + e.Problem
	}
	return fmt.Sprintf("registry: architecture %q: %s", e.Name, e.Problem)
}
