package registry_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/registry/registrytest"
)

func caps(cs ...model.Capability) model.Capabilities { return cs }

func ctorOf(v any) registry.Constructor {
	return func(registry.Config) (any, error) { return v, nil }
}

// fakeConfig is a config.json every fake accepts.
var fakeConfig = registry.Config{JSON: []byte(`{"hidden_size": 8, "vocab_size": 16, "num_hidden_layers": 4,
	"dflash_config": {"block_size": 4, "mask_token_id": 15, "target_layer_ids": [1, 2]}}`)}

func TestCapabilityRecordFromDeclaredType(t *testing.T) {
	tests := []struct {
		name string
		add  func(r *registry.Registry) error
		kind registry.Kind
		want model.Capabilities
		typ  string
	}{
		{"model-only target gets model", func(r *registry.Registry) error {
			return registry.AddTarget(r, "T", nil, registrytest.NewTarget)
		}, registry.KindTarget, caps(model.CapModel), "*registrytest.Target"},
		{"draft target gets model and draft-target", func(r *registry.Registry) error {
			return registry.AddTarget(r, "T", nil, registrytest.NewDraftTarget)
		}, registry.KindTarget, caps(model.CapModel, model.CapDraftTarget), "*registrytest.DraftTarget"},
		{"plain draft gets draft only", func(r *registry.Registry) error {
			return registry.AddDraft(r, "T", nil, registrytest.NewDraft)
		}, registry.KindDraft, caps(model.CapDraft), "*registrytest.Draft"},
		{"block draft without Select lacks selector", func(r *registry.Registry) error {
			return registry.AddDraft(r, "T", nil, registrytest.NewBlockDraft)
		}, registry.KindDraft, caps(model.CapDraft, model.CapBlockDraft), "*registrytest.BlockDraft"},
		{"selector gets all three draft capabilities", func(r *registry.Registry) error {
			return registry.AddDraft(r, "T", nil, registrytest.NewSelector)
		}, registry.KindDraft, caps(model.CapDraft, model.CapBlockDraft, model.CapSelector), "*registrytest.Selector"},
		{"interface-typed constructor gets what the interface promises", func(r *registry.Registry) error {
			return registry.AddDraft(r, "T", nil, func(c registry.Config) (model.BlockDraft, error) {
				return registrytest.NewSelector(c) // dynamically a Selector, declared a BlockDraft
			})
		}, registry.KindDraft, caps(model.CapDraft, model.CapBlockDraft), "model.BlockDraft"},
		{"interface-typed target", func(r *registry.Registry) error {
			return registry.AddTarget(r, "T", nil, func(c registry.Config) (model.Model, error) { return registrytest.NewDraftTarget(c) })
		}, registry.KindTarget, caps(model.CapModel), "model.Model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := registry.New()
			if err := tt.add(r); err != nil {
				t.Fatal(err)
			}
			e, err := r.Lookup("T")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(e.Capabilities, tt.want) || e.Kind != tt.kind || e.Source != registry.SourceBuiltin || e.Type != tt.typ {
				t.Errorf("entry = kind %s, caps [%s], source %q, type %q; want %s, [%s], built-in, %q",
					e.Kind, e.Capabilities, e.Source, e.Type, tt.kind, tt.want, tt.typ)
			}
			// The record computed from the type agrees with assertion on a
			// built instance (for concrete types, exactly).
			v, _, err := r.Build("T", fakeConfig)
			if err != nil {
				t.Fatal(err)
			}
			got := model.CapabilitiesOf(v)
			for _, c := range e.Capabilities {
				if !got.Contains(c) {
					t.Errorf("instance %T lacks %s of its record", v, c)
				}
			}
			if !strings.HasPrefix(tt.typ, "model.") && !slices.Equal(got, e.Capabilities) {
				t.Errorf("instance record [%s] != type record [%s]", got, e.Capabilities)
			}
		})
	}
}

func TestAddRejectsInvalidEntries(t *testing.T) {
	ok := func() *registry.Entry {
		return &registry.Entry{Name: "A", Kind: registry.KindDraft, Capabilities: caps(model.CapDraft), New: ctorOf(1)}
	}
	tests := []struct {
		name   string
		modify func(e *registry.Entry)
		want   string
	}{
		{"empty name", func(e *registry.Entry) { e.Name = "" }, `name "" is empty`},
		{"name with a space", func(e *registry.Entry) { e.Name = "A B" }, `name "A B" contains white space`},
		{"alias with a control character", func(e *registry.Entry) { e.Aliases = []string{"a\x00"} }, `contains white space or a control character`},
		{"alias equal to the name", func(e *registry.Entry) { e.Aliases = []string{"A"} }, `name "A" is listed twice`},
		{"alias listed twice", func(e *registry.Entry) { e.Aliases = []string{"b", "b"} }, `name "b" is listed twice`},
		{"no constructor", func(e *registry.Entry) { e.New = nil }, "no constructor"},
		{"bad kind", func(e *registry.Entry) { e.Kind = "tokenizer" }, `kind "tokenizer" is neither "target" nor "draft"`},
		{"bad source", func(e *registry.Entry) { e.Source = "elsewhere" }, `source "elsewhere" is neither "built-in" nor "plugin <name>"`},
		{"plugin source without a name", func(e *registry.Entry) { e.Source = "plugin " }, `source "plugin " is neither`},
		{"unknown capability", func(e *registry.Entry) { e.Capabilities = caps(model.CapDraft, "telepathy") }, `unknown capability "telepathy"`},
		{"capability twice", func(e *registry.Entry) { e.Capabilities = caps(model.CapDraft, model.CapDraft) }, `capability "draft" listed twice`},
		{"draft without draft", func(e *registry.Entry) { e.Capabilities = caps(model.CapBlockDraft) }, `a draft must provide capability "draft" (model.Draft)`},
		{"target without model", func(e *registry.Entry) {
			e.Kind, e.Capabilities = registry.KindTarget, caps(model.CapDraftTarget)
		}, `a target must provide capability "model" (model.Model)`},
		{"draft claiming a target capability", func(e *registry.Entry) {
			e.Capabilities = caps(model.CapDraft, model.CapDraftTarget)
		}, `capability "draft-target" belongs to a target, not a draft`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := registry.New()
			e := ok()
			tt.modify(e)
			err := r.Add(e)
			var ee *registry.EntryError
			if !errors.As(err, &ee) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Add = %v; want an *EntryError containing %q", err, tt.want)
			}
			if len(r.Entries()) != 0 {
				t.Error("a rejected entry was registered")
			}
		})
	}
	t.Run("valid entry with empty source becomes built-in and sorted", func(t *testing.T) {
		r := registry.New()
		e := ok()
		e.Capabilities = caps(model.CapSelector, model.CapDraft, model.CapBlockDraft)
		if err := r.Add(e); err != nil {
			t.Fatal(err)
		}
		got, _ := r.Lookup("A")
		if got.Source != registry.SourceBuiltin || got.Capabilities.String() != "draft, block-draft, selector" {
			t.Errorf("got source %q caps [%s]", got.Source, got.Capabilities)
		}
		if e.Source != "" {
			t.Error("Add modified the caller's entry")
		}
	})
}

func TestDuplicateNamesAndAliases(t *testing.T) {
	tests := []struct {
		name    string
		first   []string // name, aliases...
		second  []string
		wantMsg string
	}{
		{"same name", []string{"A"}, []string{"A"}, `architecture name "A" is already registered (built-in)`},
		{"name taken as alias", []string{"A", "B"}, []string{"B"}, `architecture name "B" is already registered as an alias of A (built-in)`},
		{"alias taken as name", []string{"A"}, []string{"B", "A"}, `architecture name "A" is already registered (built-in)`},
		{"alias taken as alias", []string{"A", "X"}, []string{"B", "X"}, `"X" is already registered as an alias of A`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := registry.New()
			if err := registry.AddDraft(r, tt.first[0], tt.first[1:], registrytest.NewDraft); err != nil {
				t.Fatal(err)
			}
			err := registry.AddDraft(r, tt.second[0], tt.second[1:], registrytest.NewDraft)
			var de *registry.DuplicateError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("second Add = %v; want *DuplicateError with %q", err, tt.wantMsg)
			}
			if n := len(r.Entries()); n != 1 {
				t.Errorf("%d entries after a rejected duplicate; want 1", n)
			}
			if e, err := r.Lookup(tt.second[0]); err == nil && e.Name != tt.first[0] {
				t.Errorf("%s resolves to the rejected entry", tt.second[0])
			}
		})
	}
}

func TestLookup(t *testing.T) {
	r := registry.New()
	if err := registry.AddTarget(r, "Zeta", []string{"z"}, registrytest.NewTarget); err != nil {
		t.Fatal(err)
	}
	if err := registry.AddDraft(r, "Alpha", nil, registrytest.NewDraft); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, lookup, wantName, wantErr string
	}{
		{"by name", "Zeta", "Zeta", ""},
		{"by alias", "z", "Zeta", ""},
		{"case matters", "zeta", "", `unknown architecture "zeta"; known: Alpha, Zeta`},
		{"unknown lists the known names sorted, without aliases", "Nope", "", `unknown architecture "Nope"; known: Alpha, Zeta`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := r.Lookup(tt.lookup)
			if tt.wantErr != "" {
				var ue *registry.UnknownError
				if !errors.As(err, &ue) || err.Error() != tt.wantErr {
					t.Fatalf("Lookup = %v; want *UnknownError %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || e.Name != tt.wantName {
				t.Fatalf("Lookup = %v, %v; want %s", e, err, tt.wantName)
			}
		})
	}
	t.Run("empty registry says so", func(t *testing.T) {
		_, err := registry.New().Lookup("X")
		if err == nil || err.Error() != `unknown architecture "X"; no architectures are registered` {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("returned entries are copies", func(t *testing.T) {
		e, _ := r.Lookup("Zeta")
		e.Aliases[0] = "mutated"
		e.Capabilities[0] = "mutated"
		e.Name = "mutated"
		again, _ := r.Lookup("z")
		if again.Name != "Zeta" || again.Aliases[0] != "z" || again.Capabilities[0] != model.CapModel {
			t.Errorf("registry entry changed through a returned copy: %+v", again)
		}
	})
}

func TestBuild(t *testing.T) {
	ctorErr := errors.New("config.json: rope_type yarn is not implemented")
	var nilDraft *registrytest.Draft
	tests := []struct {
		name     string
		entry    *registry.Entry
		wantInit string // substring of the *InitError; "" = success
		wantWrap error
	}{
		{"success", &registry.Entry{Name: "A", Kind: registry.KindDraft, Capabilities: caps(model.CapDraft),
			New: func(c registry.Config) (any, error) { return registrytest.NewDraft(c) }}, "", nil},
		{"constructor error", &registry.Entry{Name: "A", Kind: registry.KindDraft, Capabilities: caps(model.CapDraft),
			New: func(registry.Config) (any, error) { return nil, ctorErr }},
			"architecture A failed to initialise: config.json: rope_type yarn is not implemented", ctorErr},
		{"constructor panic", &registry.Entry{Name: "A", Kind: registry.KindDraft, Capabilities: caps(model.CapDraft),
			New: func(registry.Config) (any, error) { panic("index out of range") }},
			"architecture A failed to initialise: constructor panicked: index out of range", nil},
		{"nil instance", &registry.Entry{Name: "A", Kind: registry.KindDraft, Capabilities: caps(model.CapDraft),
			New: ctorOf(nil)}, "constructor returned nil and no error", nil},
		{"typed nil instance", &registry.Entry{Name: "A", Kind: registry.KindDraft, Capabilities: caps(model.CapDraft),
			New: ctorOf(nilDraft)}, "constructor returned nil and no error", nil},
		{"built-in whose instance lacks a recorded capability", &registry.Entry{Name: "A", Kind: registry.KindDraft,
			Capabilities: caps(model.CapDraft, model.CapBlockDraft, model.CapSelector), New: ctorOf(&registrytest.BlockDraft{})},
			"the constructor returned *registrytest.BlockDraft, which does not implement model.Selector although the entry's record lists \"selector\"", nil},
		{"plugin proxies are not asserted", &registry.Entry{Name: "A", Kind: registry.KindDraft, Source: registry.PluginSource("acme"),
			Capabilities: caps(model.CapDraft, model.CapBlockDraft), New: ctorOf(struct{ proxy int }{1})}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := registry.New()
			if err := r.Add(tt.entry); err != nil {
				t.Fatal(err)
			}
			v, e, err := r.Build("A", fakeConfig)
			if e == nil || e.Name != "A" {
				t.Fatalf("Build returned entry %v; want A even on failure", e)
			}
			if tt.wantInit == "" {
				if err != nil || v == nil {
					t.Fatalf("Build = %v, %v", v, err)
				}
				return
			}
			var ie *registry.InitError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.wantInit) || v != nil {
				t.Fatalf("Build = %v, %v; want *InitError containing %q", v, err, tt.wantInit)
			}
			if ie.Source != tt.entry.Source && !(tt.entry.Source == "" && ie.Source == registry.SourceBuiltin) {
				t.Errorf("InitError.Source = %q", ie.Source)
			}
			if tt.wantWrap != nil && !errors.Is(err, tt.wantWrap) {
				t.Errorf("InitError does not wrap the constructor's error")
			}
			var ue *registry.UnknownError
			if errors.As(err, &ue) {
				t.Error("a failed constructor reads as an unknown architecture")
			}
		})
	}
	t.Run("unknown name is an UnknownError, not an InitError", func(t *testing.T) {
		_, e, err := registry.New().Build("Nope", fakeConfig)
		var ue *registry.UnknownError
		var ie *registry.InitError
		if e != nil || !errors.As(err, &ue) || errors.As(err, &ie) {
			t.Fatalf("Build = %v, %v", e, err)
		}
	})
	t.Run("constructor receives the config", func(t *testing.T) {
		r := registry.New()
		var got registry.Config
		r.Add(&registry.Entry{Name: "A", Kind: registry.KindDraft, Capabilities: caps(model.CapDraft),
			New: func(c registry.Config) (any, error) { got = c; return &registrytest.Draft{}, nil }})
		cfg := registry.Config{Dir: "/ckpt", JSON: []byte(`{}`), DType: 12}
		if _, _, err := r.Build("A", cfg); err != nil {
			t.Fatal(err)
		}
		if got.Dir != cfg.Dir || string(got.JSON) != "{}" || got.DType != cfg.DType {
			t.Errorf("constructor got %+v", got)
		}
	})
}

func TestEntriesOrderTargetsFirst(t *testing.T) {
	r := registry.New()
	registry.AddDraft(r, "B", []string{"b1"}, registrytest.NewDraft)
	registry.AddTarget(r, "Z", nil, registrytest.NewTarget)
	registry.AddDraft(r, "A", nil, registrytest.NewDraft)
	registry.AddTarget(r, "Y", []string{"y"}, registrytest.NewTarget)
	var names []string
	for _, e := range r.Entries() {
		names = append(names, e.Name)
	}
	if want := []string{"Y", "Z", "A", "B"}; !slices.Equal(names, want) {
		t.Errorf("Entries order = %v; want %v", names, want)
	}
}

func TestPlugins(t *testing.T) {
	proxy := ctorOf(struct{}{})
	dflash3 := registry.PluginArch{Name: "DFlash3DraftModel", Aliases: []string{"dflash3"}, Kind: registry.KindDraft,
		Capabilities: caps(model.CapDraft, model.CapBlockDraft), New: proxy}
	other := registry.PluginArch{Name: "Other", Kind: registry.KindDraft, Capabilities: caps(model.CapDraft), New: proxy}

	t.Run("entries record the plugin as source", func(t *testing.T) {
		r := registry.New()
		if err := r.AddPlugin("acme-dflash3", []registry.PluginArch{dflash3, other}); err != nil {
			t.Fatal(err)
		}
		e, err := r.Lookup("dflash3")
		if err != nil {
			t.Fatal(err)
		}
		if e.Source != "plugin acme-dflash3" || e.Plugin() != "acme-dflash3" || e.Type != "" ||
			e.Capabilities.String() != "draft, block-draft" {
			t.Errorf("plugin entry = %+v", e)
		}
	})
	t.Run("built-in entries have no plugin", func(t *testing.T) {
		r := registry.New()
		registry.AddDraft(r, "A", nil, registrytest.NewDraft)
		if e, _ := r.Lookup("A"); e.Plugin() != "" {
			t.Errorf("Plugin() = %q", e.Plugin())
		}
	})
	rejects := []struct {
		name   string
		plugin string
		archs  []registry.PluginArch
		setup  func(r *registry.Registry)
		want   string
	}{
		{"empty plugin name", "", []registry.PluginArch{other}, nil, `plugin name "" is empty`},
		{"no architectures", "acme", nil, nil, `plugin "acme" serves no architectures`},
		{"declared capabilities must suit the kind", "acme", []registry.PluginArch{{Name: "X", Kind: registry.KindDraft,
			Capabilities: caps(model.CapBlockDraft), New: proxy}}, nil, `a draft must provide capability "draft"`},
		{"unknown declared capability", "acme", []registry.PluginArch{{Name: "X", Kind: registry.KindTarget,
			Capabilities: caps(model.CapModel, "warp"), New: proxy}}, nil, `unknown capability "warp"`},
		{"a name the plugin already serves", "acme", []registry.PluginArch{dflash3}, func(r *registry.Registry) {
			r.AddPlugin("acme", []registry.PluginArch{other, dflash3})
		}, `"DFlash3DraftModel" is already registered (plugin acme)`},
		{"a name with a slash", "acme", []registry.PluginArch{{Name: "acme/X", Kind: registry.KindDraft,
			Capabilities: caps(model.CapDraft), New: proxy}}, nil, `name "acme/X" contains '/'`},
		{"a plugin name with a slash", "acme/v2", []registry.PluginArch{other}, nil, `plugin name "acme/v2" contains '/'`},
		{"name clash within the plugin", "acme", []registry.PluginArch{other, {Name: "Y", Aliases: []string{"Other"},
			Kind: registry.KindDraft, Capabilities: caps(model.CapDraft), New: proxy}}, nil,
			`"Other" is already registered (plugin acme)`},
	}
	for _, tt := range rejects {
		t.Run("rejects "+tt.name, func(t *testing.T) {
			r := registry.New()
			if tt.setup != nil {
				tt.setup(r)
			}
			before := len(r.Entries())
			err := r.AddPlugin(tt.plugin, tt.archs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("AddPlugin = %v; want %q", err, tt.want)
			}
			if after := len(r.Entries()); after != before {
				t.Errorf("AddPlugin is not all-or-nothing: %d entries before, %d after", before, after)
			}
		})
	}
	t.Run("Remove drops a plugin entry with its aliases", func(t *testing.T) {
		r := registry.New()
		r.AddPlugin("acme", []registry.PluginArch{dflash3, other})
		if err := r.Remove("dflash3"); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"DFlash3DraftModel", "dflash3"} {
			if _, err := r.Lookup(n); err == nil {
				t.Errorf("%s still resolves", n)
			}
		}
		if _, err := r.Lookup("Other"); err != nil {
			t.Errorf("Remove took another entry: %v", err)
		}
	})
	t.Run("Remove refuses built-ins and unknown names", func(t *testing.T) {
		r := registry.New()
		registry.AddDraft(r, "A", []string{"a"}, registrytest.NewDraft)
		err := r.Remove("a")
		var ee *registry.EntryError
		if !errors.As(err, &ee) || err.Error() != `registry: architecture "A": is built in; only plugin entries can be removed` {
			t.Errorf("Remove(built-in) = %v", err)
		}
		var ue *registry.UnknownError
		if err := r.Remove("nope"); !errors.As(err, &ue) {
			t.Errorf("Remove(unknown) = %v", err)
		}
		if _, err := r.Lookup("A"); err != nil {
			t.Error("built-in removed")
		}
	})
	t.Run("RemovePlugin drops exactly that plugin's entries", func(t *testing.T) {
		r := registry.New()
		registry.AddDraft(r, "Builtin", nil, registrytest.NewDraft)
		r.AddPlugin("acme", []registry.PluginArch{dflash3, other})
		r.AddPlugin("zeta", []registry.PluginArch{{Name: "Z", Kind: registry.KindTarget, Capabilities: caps(model.CapModel), New: proxy}})
		got := r.RemovePlugin("acme")
		if want := []string{"DFlash3DraftModel", "Other"}; !slices.Equal(got, want) {
			t.Errorf("RemovePlugin = %v; want %v", got, want)
		}
		var left []string
		for _, e := range r.Entries() {
			left = append(left, e.Name)
		}
		if want := []string{"Z", "Builtin"}; !slices.Equal(left, want) {
			t.Errorf("left %v; want %v", left, want)
		}
		if got := r.RemovePlugin("acme"); len(got) != 0 {
			t.Errorf("second RemovePlugin = %v", got)
		}
		// The names are free again.
		if err := r.AddPlugin("acme", []registry.PluginArch{dflash3}); err != nil {
			t.Errorf("re-adding after RemovePlugin: %v", err)
		}
	})
}

// TestPluginNames: a plugin entry is registered under its qualified names
// and under the plain ones that are free, so a plugin may serve a built-in's
// name (or another plugin's) and still be found with LookupPlugin.
func TestPluginNames(t *testing.T) {
	draft := func(name string, aliases ...string) registry.PluginArch {
		return registry.PluginArch{Name: name, Aliases: aliases, Kind: registry.KindDraft, Capabilities: caps(model.CapDraft, model.CapBlockDraft), New: ctorOf(name)}
	}
	r := registry.New()
	if err := registry.AddDraft(r, "DFlashDraftModel", []string{"dflash"}, registrytest.NewDraft); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name  string
		archs []registry.PluginArch
	}{
		{"dflash", []registry.PluginArch{draft("DFlashDraftModel", "dflash", "df")}},
		{"acme", []registry.PluginArch{draft("DFlashDraftModel"), draft("AcmeDraft")}},
		{"zeta", []registry.PluginArch{draft("AcmeDraft")}},
	} {
		if err := r.AddPlugin(p.name, p.archs); err != nil {
			t.Fatalf("AddPlugin(%s) = %v", p.name, err)
		}
	}
	tests := []struct {
		name           string
		plugin, lookup string // plugin "": Lookup, else LookupPlugin
		wantSource     string
		wantErr        string
	}{
		{"a built-in keeps its name", "", "DFlashDraftModel", "built-in", ""},
		{"a built-in keeps its alias", "", "dflash", "built-in", ""},
		{"the plugin's entry by its key", "", "dflash/DFlashDraftModel", "plugin dflash", ""},
		{"the plugin's alias by its key", "", "dflash/df", "plugin dflash", ""},
		{"LookupPlugin finds the plugin's entry beside the built-in", "dflash", "DFlashDraftModel", "plugin dflash", ""},
		{"LookupPlugin by alias, even one a built-in holds", "dflash", "dflash", "plugin dflash", ""},
		{"a free plain alias of a plugin entry", "", "df", "plugin dflash", ""},
		{"a second plugin serving the same name", "acme", "DFlashDraftModel", "plugin acme", ""},
		{"the first plugin keeps a plain name", "", "AcmeDraft", "plugin acme", ""},
		{"the later plugin by LookupPlugin", "zeta", "AcmeDraft", "plugin zeta", ""},
		{"LookupPlugin never falls back to another source", "zeta", "DFlashDraftModel", "",
			`plugin zeta serves no architecture "DFlashDraftModel"; it serves: AcmeDraft`},
		{"LookupPlugin of a plugin with no entries", "nope", "X", "",
			`plugin nope serves no architecture "X"; it has no architectures registered`},
		{"unknown names list each name once", "", "Nope", "",
			`unknown architecture "Nope"; known: AcmeDraft, DFlashDraftModel`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e *registry.Entry
			var err error
			if tt.plugin == "" {
				e, err = r.Lookup(tt.lookup)
			} else {
				e, err = r.LookupPlugin(tt.plugin, tt.lookup)
			}
			if tt.wantErr != "" {
				var ue *registry.UnknownError
				if !errors.As(err, &ue) || err.Error() != tt.wantErr {
					t.Fatalf("got %v, %v; want *UnknownError %q", e, err, tt.wantErr)
				}
				return
			}
			if err != nil || e.Source != tt.wantSource {
				t.Fatalf("got %+v, %v; want source %q", e, err, tt.wantSource)
			}
		})
	}
	t.Run("Entries lists every entry once, a built-in before plugins of its name", func(t *testing.T) {
		var got []string
		for _, e := range r.Entries() {
			got = append(got, e.Key())
		}
		want := []string{"acme/AcmeDraft", "zeta/AcmeDraft", "DFlashDraftModel", "acme/DFlashDraftModel", "dflash/DFlashDraftModel"}
		if !slices.Equal(got, want) {
			t.Errorf("keys %q; want %q", got, want)
		}
	})
	t.Run("Build by key builds the plugin's entry", func(t *testing.T) {
		v, e, err := r.Build(registry.QualifiedName("zeta", "AcmeDraft"), fakeConfig)
		if err != nil || e.Plugin() != "zeta" || v != "AcmeDraft" {
			t.Fatalf("Build = %v, %+v, %v", v, e, err)
		}
		v, e, err = r.Build("DFlashDraftModel", fakeConfig)
		if err != nil || e.Source != registry.SourceBuiltin {
			t.Fatalf("Build(plain name) = %T, %+v, %v; want the built-in", v, e, err)
		}
	})
	t.Run("a built-in added later cannot take a plugin's plain name", func(t *testing.T) {
		err := registry.AddDraft(r, "AcmeDraft", nil, registrytest.NewDraft)
		if err == nil || err.Error() != `registry: architecture name "AcmeDraft" is already registered (plugin acme)` {
			t.Fatalf("AddDraft = %v", err)
		}
	})
	t.Run("RemovePlugin leaves names other entries hold", func(t *testing.T) {
		if got := r.RemovePlugin("dflash"); !slices.Equal(got, []string{"DFlashDraftModel"}) {
			t.Fatalf("RemovePlugin = %v", got)
		}
		for name, want := range map[string]string{"DFlashDraftModel": "built-in", "dflash": "built-in", "df": "", "dflash/DFlashDraftModel": ""} {
			e, err := r.Lookup(name)
			switch {
			case want == "" && err == nil:
				t.Errorf("%s still resolves, to %s", name, e.Source)
			case want != "" && (err != nil || e.Source != want):
				t.Errorf("Lookup(%s) = %v, %v; want %s", name, e, err, want)
			}
		}
		if err := r.Remove(registry.QualifiedName("acme", "DFlashDraftModel")); err != nil {
			t.Fatalf("Remove(key) = %v", err)
		}
		if e, err := r.Lookup("AcmeDraft"); err != nil || e.Plugin() != "acme" {
			t.Errorf("Remove took another entry of the plugin: %v, %v", e, err)
		}
	})
}

func TestRegisterIntoDefault(t *testing.T) {
	const name = "RegistryTestOnlyTarget"
	registry.RegisterTarget(name, []string{name + "Alias"}, registrytest.NewTarget)
	defer func() {
		p := recover()
		err, ok := p.(error)
		var de *registry.DuplicateError
		if !ok || !errors.As(err, &de) {
			t.Fatalf("second registration: recovered %v; want a *DuplicateError panic", p)
		}
	}()
	if e, err := registry.Default.Lookup(name + "Alias"); err != nil || e.Kind != registry.KindTarget {
		t.Fatalf("Default lookup: %v, %v", e, err)
	}
	registry.RegisterDraft(name, nil, registrytest.NewDraft)
}

func TestConcurrentUse(t *testing.T) {
	r := registry.New()
	registry.AddTarget(r, "T", nil, registrytest.NewTarget)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := string(rune('a' + i))
			for range 50 {
				r.AddPlugin(p, []registry.PluginArch{{Name: "P" + p, Kind: registry.KindDraft, Capabilities: caps(model.CapDraft), New: ctorOf(1)}})
				r.Lookup("T")
				r.Entries()
				r.Build("T", fakeConfig)
				r.RemovePlugin(p)
			}
		}()
	}
	wg.Wait()
	if n := len(r.Entries()); n != 1 {
		t.Errorf("%d entries left; want 1", n)
	}
}
