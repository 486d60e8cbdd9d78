// Package registry maps architecture names (Hugging Face class names, the
// architectures[0] of config.json, plus aliases) to constructors and
// capability records. Built-in architectures register from their package's
// init with RegisterTarget or RegisterDraft; plugin-provided ones enter the
// same registry through AddPlugin with their source recorded, and leave it
// through Remove or RemovePlugin.
//
// Names and plugins: a plugin entry is always registered under its
// plugin-qualified names, QualifiedName(plugin, name) for its name and each
// alias, which no other entry can hold; its plain name and aliases are added
// too, each only if free when it is added. A built-in (or an earlier plugin)
// therefore keeps a name it holds, and a plugin may serve an architecture of the same
// name as a built-in: Lookup("DFlashDraftModel") finds the built-in and
// LookupPlugin("dflash", "DFlashDraftModel") the plugin's entry. A manifest
// that names a plugin resolves its architecture with LookupPlugin.
//
// A built-in entry's capability record is computed by type assertion on the
// type its constructor declares, so it needs no instance and no weights. A
// plugin entry's record is what the plugin's Describe declared. Build
// distinguishes an unknown name (*UnknownError) from a known architecture
// whose constructor failed (*InitError).
package registry

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode"

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

// Valid reports whether k is KindTarget or KindDraft.
func (k Kind) Valid() bool { return k == KindTarget || k == KindDraft }

// SourceBuiltin is the source of architectures compiled into the program.
const SourceBuiltin = "built-in"

// sourcePluginPrefix starts the source of plugin-provided entries.
const sourcePluginPrefix = "plugin "

// PluginSource is the Source of entries served by the named plugin:
// "plugin <name>".
func PluginSource(plugin string) string { return sourcePluginPrefix + plugin }

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
// config: a model.Model for targets, a model.Draft for drafts (or, for a
// plugin entry, whatever the plugin host's proxy is).
type Constructor func(cfg Config) (any, error)

// Entry is one registered architecture.
type Entry struct {
	// Name is the Hugging Face class name, e.g. "Qwen3_5ForCausalLM".
	Name string
	// Aliases are other names that resolve to this entry.
	Aliases []string
	// Kind is target or draft.
	Kind Kind
	// Source is SourceBuiltin or PluginSource(name). Add fills in
	// SourceBuiltin when it is empty.
	Source string
	// Capabilities is the entry's capability record, in the order of
	// model.AllCapabilities: computed by type assertion on the constructor's
	// declared result type for built-ins, declared by Describe for plugins.
	Capabilities model.Capabilities
	// Type is the Go type the constructor declares ("*dflash.Draft"), or ""
	// when unknown (plugin entries, entries added by hand).
	Type string
	// New builds an instance.
	New Constructor
}

// Plugin returns the name of the plugin serving e, or "" for a built-in.
func (e *Entry) Plugin() string {
	name, ok := strings.CutPrefix(e.Source, sourcePluginPrefix)
	if !ok {
		return ""
	}
	return name
}

// Names returns e's name followed by its aliases.
func (e *Entry) Names() []string { return append([]string{e.Name}, e.Aliases...) }

// Key returns the name that identifies e in its registry whatever else is
// registered: Name for a built-in, QualifiedName(plugin, Name) for a plugin
// entry. Lookup, Build and Remove accept it.
func (e *Entry) Key() string {
	if p := e.Plugin(); p != "" {
		return QualifiedName(p, e.Name)
	}
	return e.Name
}

// QualifiedName is the registry key of the architecture (or alias) name
// served by plugin: "<plugin>/<name>". Architecture and plugin names cannot
// contain '/', so it is unambiguous.
func QualifiedName(plugin, name string) string { return plugin + "/" + name }

// requiredKeys are the keys e must be registered under: its names for a
// built-in, their qualified forms for a plugin entry.
func (e *Entry) requiredKeys() []string {
	p := e.Plugin()
	if p == "" {
		return e.Names()
	}
	keys := e.Names()
	for i, n := range keys {
		keys[i] = QualifiedName(p, n)
	}
	return keys
}

// clone returns a copy of e that shares nothing mutable with it.
func (e *Entry) clone() *Entry {
	c := *e
	c.Aliases = slices.Clone(e.Aliases)
	c.Capabilities = slices.Clone(e.Capabilities)
	return &c
}

// Registry is a set of architectures, safe for concurrent use. The zero value
// is not usable; use New.
type Registry struct {
	mu sync.RWMutex
	// entries maps every key to its entry (one *Entry per architecture):
	// names and aliases of built-ins; qualified names and aliases of plugin
	// entries, plus their plain ones where free.
	entries map[string]*Entry
}

// New returns an empty registry.
func New() *Registry { return &Registry{entries: map[string]*Entry{}} }

// Default is the registry built-in architectures register into, and the one
// programs resolve manifests against.
var Default = New()

// Add registers a copy of e under its name and aliases (a plugin entry: under
// their qualified forms, and the plain ones where free). The entry must have
// a name, a constructor, a valid kind, a source that is SourceBuiltin (or
// empty, meaning built-in) or PluginSource(name), and a capability record
// that suits its kind (a target provides "model", a draft "draft"). A name
// or alias already taken, by this entry or another, is a *DuplicateError (for
// a plugin entry: a qualified one, taken by an entry of the same plugin).
func (r *Registry) Add(e *Entry) error {
	c := e.clone()
	if c.Source == "" {
		c.Source = SourceBuiltin
	}
	if err := c.validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.checkFreeLocked(c); err != nil {
		return err
	}
	r.addLocked(c)
	return nil
}

// validate checks an entry on its own (not against the registry).
func (e *Entry) validate() error {
	bad := func(format string, args ...any) error {
		return &EntryError{Name: e.Name, Problem: fmt.Sprintf(format, args...)}
	}
	names := map[string]bool{}
	for _, n := range e.Names() {
		if problem := nameProblem(n); problem != "" {
			return bad("name %q %s", n, problem)
		}
		if names[n] {
			return bad("name %q is listed twice", n)
		}
		names[n] = true
	}
	if e.New == nil {
		return bad("no constructor")
	}
	if !e.Kind.Valid() {
		return bad("kind %q is neither %q nor %q", e.Kind, KindTarget, KindDraft)
	}
	if e.Source != SourceBuiltin {
		p := e.Plugin()
		if p == "" {
			return bad("source %q is neither %q nor %q", e.Source, SourceBuiltin, PluginSource("<name>"))
		}
		if problem := nameProblem(p); problem != "" {
			return bad("plugin name %q %s", p, problem)
		}
	}
	seen := map[model.Capability]bool{}
	for _, c := range e.Capabilities {
		if _, err := model.ParseCapability(string(c)); err != nil {
			return bad("%v", err)
		}
		if seen[c] {
			return bad("capability %q listed twice", c)
		}
		seen[c] = true
	}
	if want := kindCapability(e.Kind); !seen[want] {
		return bad("a %s must provide capability %q (%s); its record is [%s]", e.Kind, want, want.InterfaceName(), e.Capabilities)
	}
	for _, c := range e.Capabilities {
		if KindOf(c) != e.Kind {
			return bad("capability %q belongs to a %s, not a %s", c, KindOf(c), e.Kind)
		}
	}
	// Keep records in the canonical order so that listings compare equal.
	slices.SortFunc(e.Capabilities, func(a, b model.Capability) int {
		return slices.Index(model.AllCapabilities, a) - slices.Index(model.AllCapabilities, b)
	})
	return nil
}

// nameProblem says why s cannot be an architecture or plugin name, or "".
func nameProblem(s string) string {
	if s == "" {
		return "is empty"
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return "contains white space or a control character"
		}
		if r == '/' {
			return `contains '/', which only plugin-qualified names ("<plugin>/<name>") have`
		}
	}
	return ""
}

// KindOf is the kind of architecture a capability belongs to: "model" and
// "draft-target" to targets, "draft", "block-draft" and "selector" to
// drafts.
func KindOf(c model.Capability) Kind {
	switch c {
	case model.CapModel, model.CapDraftTarget:
		return KindTarget
	}
	return KindDraft
}

// kindCapability is the capability every architecture of kind k provides.
func kindCapability(k Kind) model.Capability {
	if k == KindTarget {
		return model.CapModel
	}
	return model.CapDraft
}

// checkFreeLocked reports the first of e's required keys that is already
// taken.
func (r *Registry) checkFreeLocked(e *Entry) error {
	for _, k := range e.requiredKeys() {
		if old, taken := r.entries[k]; taken {
			name := k
			if old.Plugin() != "" {
				// Name the contested name as the entries know it.
				name = strings.TrimPrefix(k, old.Plugin()+"/")
			}
			return &DuplicateError{Name: name, Existing: old.Name, Source: old.Source}
		}
	}
	return nil
}

// addLocked registers e under its required keys and, for a plugin entry,
// under each plain name and alias that is free.
func (r *Registry) addLocked(e *Entry) {
	for _, k := range e.requiredKeys() {
		r.entries[k] = e
	}
	if e.Plugin() == "" {
		return
	}
	for _, n := range e.Names() {
		if _, taken := r.entries[n]; !taken {
			r.entries[n] = e
		}
	}
}

// AddTarget adds a built-in target architecture to r; its capability record
// is computed from T, the type the constructor declares, by type assertion.
func AddTarget[T model.Model](r *Registry, name string, aliases []string, ctor func(Config) (T, error)) error {
	return r.Add(&Entry{Name: name, Aliases: aliases, Kind: KindTarget, Source: SourceBuiltin,
		Capabilities: capabilitiesOfType[T](), Type: typeName[T](),
		New: func(c Config) (any, error) { return ctor(c) }})
}

// AddDraft adds a built-in draft architecture to r; its capability record is
// computed from T, the type the constructor declares, by type assertion.
func AddDraft[T model.Draft](r *Registry, name string, aliases []string, ctor func(Config) (T, error)) error {
	return r.Add(&Entry{Name: name, Aliases: aliases, Kind: KindDraft, Source: SourceBuiltin,
		Capabilities: capabilitiesOfType[T](), Type: typeName[T](),
		New: func(c Config) (any, error) { return ctor(c) }})
}

// RegisterTarget adds a built-in target architecture to Default; its
// capability record is computed from T. It panics on a duplicate name or an
// invalid entry: called from init, either is a programming error.
func RegisterTarget[T model.Model](name string, aliases []string, ctor func(Config) (T, error)) {
	if err := AddTarget(Default, name, aliases, ctor); err != nil {
		panic(err)
	}
}

// RegisterDraft adds a built-in draft architecture to Default; its capability
// record is computed from T. It panics on a duplicate name or an invalid
// entry.
func RegisterDraft[T model.Draft](name string, aliases []string, ctor func(Config) (T, error)) {
	if err := AddDraft(Default, name, aliases, ctor); err != nil {
		panic(err)
	}
}

// capabilityInterfaces maps each capability to its interface type.
var capabilityInterfaces = map[model.Capability]reflect.Type{
	model.CapModel:       reflect.TypeFor[model.Model](),
	model.CapDraftTarget: reflect.TypeFor[model.DraftTarget](),
	model.CapDraft:       reflect.TypeFor[model.Draft](),
	model.CapBlockDraft:  reflect.TypeFor[model.BlockDraft](),
	model.CapSelector:    reflect.TypeFor[model.Selector](),
}

// capabilitiesOfType computes the record of a constructor's declared result
// type T by asserting T against each capability interface. Method sets belong
// to the type, so no instance is needed, and an interface T (a constructor
// declared to return model.BlockDraft) gets exactly what the interface
// promises.
func capabilitiesOfType[T any]() model.Capabilities {
	t := reflect.TypeFor[T]()
	var out model.Capabilities
	for _, c := range model.AllCapabilities {
		if t.Implements(capabilityInterfaces[c]) {
			out = append(out, c)
		}
	}
	return out
}

func typeName[T any]() string { return reflect.TypeFor[T]().String() }

// Lookup finds an entry by name, alias or key (Entry.Key) and returns a copy
// of it. A plain name that a built-in and a plugin entry share finds the
// built-in (see the package comment). An unknown name is an *UnknownError
// listing the known names.
func (r *Registry) Lookup(name string) (*Entry, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.entries[name]; ok {
		return e.clone(), nil
	}
	return nil, &UnknownError{Name: name, Known: r.namesLocked()}
}

// LookupPlugin finds the entry plugin serves under name (its name or an
// alias), whatever other entries share that name, and returns a copy of it.
// None is an *UnknownError with Plugin set, listing the names plugin serves.
func (r *Registry) LookupPlugin(plugin, name string) (*Entry, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.entries[QualifiedName(plugin, name)]; ok && e.Plugin() == plugin {
		return e.clone(), nil
	}
	var served []string
	for k, e := range r.entries {
		if k == e.Key() && e.Plugin() == plugin {
			served = append(served, e.Name)
		}
	}
	slices.Sort(served)
	return nil, &UnknownError{Name: name, Plugin: plugin, Known: served}
}

// Build resolves name as Lookup does and constructs an instance, distinguishing an unknown
// name (*UnknownError) from a constructor failure (*InitError). A
// constructor that panics, returns nil, or (for a built-in) returns a value
// lacking a capability of its record fails with an *InitError too; the
// returned entry is then non-nil.
func (r *Registry) Build(name string, cfg Config) (any, *Entry, error) {
	e, err := r.Lookup(name)
	if err != nil {
		return nil, nil, err
	}
	v, err := construct(e, cfg)
	if err != nil {
		return nil, e, &InitError{Name: e.Name, Source: e.Source, Err: err}
	}
	if e.Plugin() == "" {
		// A plugin's proxy speaks the session protocol and need not
		// implement the interfaces in process; a built-in must.
		for _, c := range e.Capabilities {
			if !c.Has(v) {
				return nil, e, &InitError{Name: e.Name, Source: e.Source,
					Err: fmt.Errorf("the constructor returned %T, which does not implement %s although the entry's record lists %q", v, c.InterfaceName(), c)}
			}
		}
	}
	return v, e, nil
}

// construct calls e.New, turning a panic or a nil result into an error.
func construct(e *Entry, cfg Config) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("constructor panicked: %v", p)
		}
	}()
	v, err = e.New(cfg)
	if err != nil {
		return nil, err
	}
	if isNil(v) {
		return nil, fmt.Errorf("constructor returned nil and no error")
	}
	return v, nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// Entries returns a copy of every entry once: targets first, then drafts,
// each sorted by name (a built-in before plugin entries of the same name).
func (r *Registry) Entries() []*Entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Entry
	for k, e := range r.entries {
		if k == e.Key() {
			out = append(out, e.clone())
		}
	}
	slices.SortFunc(out, func(a, b *Entry) int {
		if a.Kind != b.Kind {
			if a.Kind == KindTarget {
				return -1
			}
			return 1
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Plugin(), b.Plugin()) // a built-in ("") first
	})
	return out
}

// PluginArch is one architecture a plugin serves, as its Describe reports it.
type PluginArch struct {
	// Name is the architecture's class name (config.json architectures[0]).
	Name string
	// Aliases are other names that resolve to it.
	Aliases []string
	// Kind is target or draft.
	Kind Kind
	// Capabilities is what Describe declares; the registry cannot prove it
	// by assertion, since the plugin runs in another process.
	Capabilities model.Capabilities
	// New builds the host-side proxy for the architecture.
	New Constructor
}

// AddPlugin registers every architecture a plugin serves, each with Source
// PluginSource(plugin), under its qualified names and the plain ones that are
// free (see the package comment): serving a built-in's name is not a clash.
// It is the plugin host's entry point, called after the handshake and
// Describe. Either all architectures are added or, on the first invalid or
// duplicate one (a name the same plugin already serves), none.
func (r *Registry) AddPlugin(plugin string, archs []PluginArch) error {
	if problem := nameProblem(plugin); problem != "" {
		return &EntryError{Problem: fmt.Sprintf("plugin name %q %s", plugin, problem)}
	}
	if len(archs) == 0 {
		return &EntryError{Problem: fmt.Sprintf("plugin %q serves no architectures", plugin)}
	}
	entries := make([]*Entry, len(archs))
	for i, a := range archs {
		e := (&Entry{Name: a.Name, Aliases: a.Aliases, Kind: a.Kind, Source: PluginSource(plugin),
			Capabilities: a.Capabilities, New: a.New}).clone()
		if err := e.validate(); err != nil {
			return err
		}
		entries[i] = e
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	taken := map[string]string{} // names of this call's earlier entries
	for _, e := range entries {
		if err := r.checkFreeLocked(e); err != nil {
			return err
		}
		for _, n := range e.Names() {
			if first, dup := taken[n]; dup {
				return &DuplicateError{Name: n, Existing: first, Source: e.Source}
			}
			taken[n] = e.Name
		}
	}
	for _, e := range entries {
		r.addLocked(e)
	}
	slog.Debug("registry: plugin architectures added", "plugin", plugin, "count", len(entries))
	return nil
}

// Remove unregisters the plugin entry that name (a name, alias or key)
// resolves to, with all its names. Built-in entries cannot be removed: that is an error,
// as is an unknown name (*UnknownError).
func (r *Registry) Remove(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[name]
	if !ok {
		return &UnknownError{Name: name, Known: r.namesLocked()}
	}
	if e.Plugin() == "" {
		return &EntryError{Name: e.Name, Problem: "is built in; only plugin entries can be removed"}
	}
	r.removeLocked(e)
	return nil
}

// RemovePlugin unregisters every entry served by plugin (after it exits or is
// unloaded) and returns their names, sorted; none is not an error.
func (r *Registry) RemovePlugin(plugin string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gone []*Entry
	for k, e := range r.entries {
		if k == e.Key() && e.Plugin() == plugin {
			gone = append(gone, e)
		}
	}
	removed := make([]string, 0, len(gone))
	for _, e := range gone {
		r.removeLocked(e)
		removed = append(removed, e.Name)
	}
	slices.Sort(removed)
	if len(removed) > 0 {
		slog.Debug("registry: plugin architectures removed", "plugin", plugin, "names", removed)
	}
	return removed
}

// removeLocked deletes every key that holds e (a plain name held by
// another entry stays).
func (r *Registry) removeLocked(e *Entry) {
	for _, k := range slices.Concat(e.Names(), e.requiredKeys()) {
		if r.entries[k] == e {
			delete(r.entries, k)
		}
	}
}

// namesLocked returns the entries' names (a name that several entries share
// once), sorted.
func (r *Registry) namesLocked() []string {
	var names []string
	for k, e := range r.entries {
		if k == e.Key() {
			names = append(names, e.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
