// Package registry maps architecture names (Hugging Face class names, the
// architectures[0] of config.json, plus aliases) to constructors and
// capability records. Built-in architectures register from their package's
// init; plugin-provided ones enter the same registry with their source
// recorded.
package registry

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/model"
)

// Kind says whether an architecture is a target or a draft.
type Kind string

// Kinds.
const (
	KindTarget Kind = "target"
	KindDraft  Kind = "draft"
)

// SourceBuiltin is the source of architectures compiled into the program.
const SourceBuiltin = "built-in"

// Config is what a constructor receives: the checkpoint's config.json and
// where it lives. Constructors parse and validate the config and build a
// weightless instance; weights come later through LoadWeights.
type Config struct {
	// Dir is the checkpoint folder (absolute).
	Dir string
	// JSON is the content of config.json.
	JSON json.RawMessage
	// DType is the compute dtype the manifest asked for.
	DType mlx.DType
}

// Constructor builds a weightless instance of an architecture from its
// config: a model.Model for targets, a model.Draft for drafts.
type Constructor func(cfg Config) (any, error)

// Entry is one registered architecture.
type Entry struct {
	// Name is the Hugging Face class name, e.g. "Qwen3_5ForCausalLM".
	Name string
	// Aliases are other names that resolve to this entry.
	Aliases []string
	// Kind is target or draft.
	Kind Kind
	// Source is SourceBuiltin or "plugin <name>".
	Source string
	// Capabilities is the record computed by type assertion on the
	// constructor's declared result type.
	Capabilities model.Capabilities
	// New builds an instance.
	New Constructor
}

// Registry is a set of architectures. The zero value is not usable; use New.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]*Entry // by name and alias
}

// New returns an empty registry.
func New() *Registry { return &Registry{entries: map[string]*Entry{}} }

// Default is the registry built-in architectures register into.
var Default = New()

// Add registers e under its name and aliases. A name or alias already taken
// is an error.
func (r *Registry) Add(e *Entry) error {
	if e.Name == "" || e.New == nil {
		return fmt.Errorf("registry: entry needs a name and a constructor")
	}
	if e.Kind != KindTarget && e.Kind != KindDraft {
		return fmt.Errorf("registry: %s: kind must be %q or %q", e.Name, KindTarget, KindDraft)
	}
	if e.Source == "" {
		e.Source = SourceBuiltin
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range append([]string{e.Name}, e.Aliases...) {
		if old, dup := r.entries[n]; dup {
			return fmt.Errorf("registry: architecture name %q is already registered (by %s, %s)", n, old.Name, old.Source)
		}
	}
	for _, n := range append([]string{e.Name}, e.Aliases...) {
		r.entries[n] = e
	}
	return nil
}

// RegisterTarget adds a built-in target architecture to Default; its
// capability record is computed from T. It panics on a duplicate name
// (called from init, a duplicate is a programming error).
func RegisterTarget[T model.Model](name string, aliases []string, ctor func(Config) (T, error)) {
	register(KindTarget, name, aliases, capabilitiesOfType[T](), func(c Config) (any, error) { return ctor(c) })
}

// RegisterDraft adds a built-in draft architecture to Default; its
// capability record is computed from T.
func RegisterDraft[T model.Draft](name string, aliases []string, ctor func(Config) (T, error)) {
	register(KindDraft, name, aliases, capabilitiesOfType[T](), func(c Config) (any, error) { return ctor(c) })
}

func register(kind Kind, name string, aliases []string, caps model.Capabilities, ctor Constructor) {
	if err := Default.Add(&Entry{Name: name, Aliases: aliases, Kind: kind, Source: SourceBuiltin, Capabilities: caps, New: ctor}); err != nil {
		panic(err)
	}
}

// capabilitiesOfType computes the record of a constructor's declared result
// type by asserting its zero value (a typed nil pointer for pointer types)
// against each interface: method sets belong to the type, so no instance is
// needed.
func capabilitiesOfType[T any]() model.Capabilities {
	var zero T
	return model.CapabilitiesOf(any(zero))
}

// UnknownError reports a name no entry has.
type UnknownError struct {
	Name  string
	Known []string
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("unknown architecture %q; known: %s", e.Name, strings.Join(e.Known, ", "))
}

// InitError reports a known architecture whose constructor failed.
type InitError struct {
	Name string
	Err  error
}

func (e *InitError) Error() string {
	return fmt.Sprintf("architecture %s failed to initialise: %v", e.Name, e.Err)
}

func (e *InitError) Unwrap() error { return e.Err }

// Lookup finds an entry by name or alias.
func (r *Registry) Lookup(name string) (*Entry, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.entries[name]; ok {
		return e, nil
	}
	return nil, &UnknownError{Name: name, Known: r.namesLocked()}
}

// Build resolves name and constructs an instance, distinguishing an unknown
// name (*UnknownError) from a constructor failure (*InitError).
func (r *Registry) Build(name string, cfg Config) (any, *Entry, error) {
	e, err := r.Lookup(name)
	if err != nil {
		return nil, nil, err
	}
	v, err := e.New(cfg)
	if err != nil {
		return nil, e, &InitError{Name: e.Name, Err: err}
	}
	return v, e, nil
}

// Entries returns every entry once, sorted by kind then name.
func (r *Registry) Entries() []*Entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Entry
	for n, e := range r.entries {
		if n == e.Name {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func (r *Registry) namesLocked() []string {
	var names []string
	for n, e := range r.entries {
		if n == e.Name {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}
