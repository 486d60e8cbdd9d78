package manifests_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/specula-dev/specula/manifests"
	"github.com/specula-dev/specula/model"
)

// lines joins its arguments into a TOML document, one per line, so that a
// test can count the line of the key it breaks.
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

// header is a valid start: lines 1-6.
var header = []string{
	`schema = 1`,        // 1
	`name = "t"`,        // 2
	``,                  // 3
	`[target]`,          // 4
	`path = "models/T"`, // 5
	`capabilities = ["model", "draft-target"]`, // 6
}

// withTarget returns header followed by more lines (line 7 onwards).
func withTarget(more ...string) string { return lines(append(slices.Clone(header), more...)...) }

// withDraft returns header, a blank line, a valid [draft] (lines 8-10) and
// more lines (line 11 onwards).
func withDraft(more ...string) string {
	return withTarget(append([]string{``, `[draft]`, `path = "models/D"`, `capabilities = ["draft", "block-draft"]`}, more...)...)
}

func TestDecodeErrors(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	tests := []struct {
		name string
		doc  string
		kind error
		want string // the whole message after "manifest m.toml"
	}{
		// TOML itself.
		{"syntax error", lines(`schema = 1`, `[target`), manifests.ErrSyntax, `:2: invalid TOML: `},
		{"duplicate key", withTarget(`path = "again"`), manifests.ErrSyntax, `:7: invalid TOML: Key 'target.path' has already been defined.`},
		{"not UTF-8", "schema = 1\nname = \"\xff\"\n", manifests.ErrSyntax, `: invalid TOML: the file is not UTF-8 text`},

		// Schema.
		{"missing schema", lines(`name = "t"`), manifests.ErrSchema, `: missing schema = 1 (put it on the first line of the manifest)`},
		{"newer schema", lines(`schema = 2`, `future = true`), manifests.ErrSchema, `:1: schema = 2: this specula reads schema 1`},
		{"schema as a string", lines(`name = "x"`, `schema = "1"`), manifests.ErrSchema, `:2: schema = "1": this specula reads schema 1`},
		// A float is named as one, as written: "schema = 1: this specula
		// reads schema 1" contradicted itself.
		{"schema as a float", lines(`schema = 1.0`), manifests.ErrSchema, `:1: schema must be the integer 1, not a float (1.0): this specula reads schema 1`},

		// Unknown keys and tables, with suggestions.
		{"misspelt key", lines(`schema = 1`, ``, `[target]`, `path = "m"`, ``, ``, `capabilites = ["model"]`),
			manifests.ErrUnknownKey, `:7: unknown key "capabilites" in [target] (did you mean "capabilities"?)`},
		{"key differing only in case", withTarget(`Dtype = "float32"`), manifests.ErrUnknownKey,
			`:7: unknown key "Dtype" in [target] (keys are case-sensitive: did you mean "dtype"?)`},
		{"key in capitals", withTarget(`PATH = "x"`), manifests.ErrUnknownKey,
			`:7: unknown key "PATH" in [target] (keys are case-sensitive: did you mean "path"?)`},
		{"table differing only in case", lines(`schema = 1`, `[Target]`, `path = "x"`), manifests.ErrUnknownKey,
			`:2: unknown table [Target] (did you mean [target]?)`},
		{"misspelt table", withTarget(`[sampeling]`, `temperature = 1`), manifests.ErrUnknownKey,
			`:7: unknown table [sampeling] (did you mean [sampling]?)`},
		{"unknown table", withTarget(`[tokenizer]`, `path = "x"`), manifests.ErrUnknownKey,
			`:7: unknown table [tokenizer] (tables: [target], [draft], [speculation], [sampling])`},
		{"misspelt top-level key", lines(`schema = 1`, `nmae = "x"`), manifests.ErrUnknownKey,
			`:2: unknown key "nmae" at the top level (did you mean "name"?)`},
		{"top-level key that belongs in a table", lines(`schema = 1`, `path = "x"`), manifests.ErrUnknownKey,
			`:2: unknown key "path" at the top level (path belongs in [target] or [draft])`},
		{"dtype in [draft]", withDraft(`dtype = "float32"`), manifests.ErrUnknownKey,
			`:11: unknown key "dtype" in [draft] (the draft computes in the target's dtype; set dtype in [target])`},
		{"weights in [target]", withTarget(`weights = false`), manifests.ErrUnknownKey,
			`:7: unknown key "weights" in [target] (only a draft can be weightless (weights = false, for prompt-lookup drafters))`},
		{"weights as a string", withDraft(`weights = "none"`), manifests.ErrType,
			`:11: [draft] weights must be true or false`},
		{"plugin in [target]", withTarget(`plugin = "acme"`), manifests.ErrUnknownKey,
			`:7: unknown key "plugin" in [target] (plugins serve drafts; put plugin and sha256 in [draft])`},
		{"depth in [speculation]", withTarget(`[speculation]`, `depth = 3`), manifests.ErrUnknownKey,
			`:8: unknown key "depth" in [speculation] (the depth controller's cap is max_depth; a selector draft's fixed depth is selector_depth)`},
		{"unknown key without a suggestion", withTarget(`colour = "blue"`), manifests.ErrUnknownKey,
			`:7: unknown key "colour" in [target]`},
		{"first problem in file order wins", withTarget(`zzz = 1`, `aaa = 2`), manifests.ErrUnknownKey, `:7: unknown key "zzz"`},

		// Required keys and tables.
		{"missing [target]", lines(`schema = 1`), manifests.ErrMissing,
			`: missing table [target]: every manifest names the target checkpoint (path and capabilities)`},
		{"missing path", lines(`schema = 1`, `[target]`, `capabilities = ["model"]`), manifests.ErrMissing,
			`:2: [target] is missing the required key path (the checkpoint folder, relative to this manifest's folder)`},
		{"missing capabilities", lines(`schema = 1`, `[target]`, `path = "x"`), manifests.ErrMissing,
			`:2: [target] is missing the required key capabilities (what the run may use, e.g. capabilities = ["model", "draft-target"])`},
		{"draft missing capabilities", withTarget(``, `[draft]`, `path = "d"`), manifests.ErrMissing,
			`:8: [draft] is missing the required key capabilities (what the run may use, e.g. capabilities = ["draft", "block-draft"])`},

		// Types.
		{"table given as a string", lines(`schema = 1`, `target = "models/T"`), manifests.ErrType,
			`:2: target must be a table ([target]), not a string ("models/T")`},
		{"array of tables", lines(`schema = 1`, `[[target]]`, `path = "x"`), manifests.ErrType,
			`:2: target must be a table ([target]), not an array of tables`},
		{"path as an integer", lines(`schema = 1`, `[target]`, `path = 5`), manifests.ErrType,
			`:3: [target] path must be a string, not an integer (5)`},
		{"name as a boolean", lines(`schema = 1`, `name = true`), manifests.ErrType, `:2: name must be a string, not a boolean (true)`},
		{"capabilities as a string", lines(`schema = 1`, `[target]`, `capabilities = "model"`), manifests.ErrType,
			`:3: [target] capabilities must be an array of capability names, not a string ("model")`},
		{"capability as an integer", lines(`schema = 1`, `[target]`, `capabilities = ["model", 2]`), manifests.ErrType,
			`:3: [target] capabilities [1] must be a string, not an integer (2)`},
		{"dtype as an integer", withTarget(`dtype = 16`), manifests.ErrType, `:7: [target] dtype must be a string, not an integer (16)`},
		{"allow_slow_dtype as a string", withTarget(`allow_slow_dtype = "yes"`), manifests.ErrType,
			`:7: [target] allow_slow_dtype must be true or false, not a string ("yes")`},
		{"max_depth as a float", withTarget(`[speculation]`, `max_depth = 1.5`), manifests.ErrType,
			`:8: [speculation] max_depth must be an integer, not a float (1.5)`},
		{"max_depth as an integral float", withTarget(`[speculation]`, `max_depth = 7.0`), manifests.ErrType,
			`:8: [speculation] max_depth must be an integer, not a float (7.0)`},
		{"enabled as an integer", withTarget(`[speculation]`, `enabled = 1`), manifests.ErrType,
			`:8: [speculation] enabled must be true or false, not an integer (1)`},
		{"temperature as a string", withTarget(`[sampling]`, `temperature = "hot"`), manifests.ErrType,
			`:8: [sampling] temperature must be a number, not a string ("hot")`},
		{"seed as a float", withTarget(`[sampling]`, `seed = 4.2`), manifests.ErrType,
			`:8: [sampling] seed must be an integer, not a float (4.2)`},
		{"stop as a string", withTarget(`[sampling]`, `stop = "</s>"`), manifests.ErrType,
			`:8: [sampling] stop must be an array of token ids and strings, not a string ("</s>")`},
		{"stop with a float", withTarget(`[sampling]`, `stop = [1, 2.5]`), manifests.ErrType,
			`:8: [sampling] stop [1] must be a token id (integer) or a string, not a float (2.5)`},
		{"stop with a boolean", withTarget(`[sampling]`, `stop = [true]`), manifests.ErrType,
			`:8: [sampling] stop [0] must be a token id (integer) or a string, not a boolean (true)`},
		{"date as a path", lines(`schema = 1`, `[target]`, `path = 2026-01-01`), manifests.ErrType,
			`:3: [target] path must be a string, not a date/time`},

		// Capabilities.
		{"unknown capability", lines(`schema = 1`, `[target]`, `path = "x"`, `capabilities = ["modle"]`), manifests.ErrValue,
			`:4: [target] capabilities "modle" is not a capability (known: model, draft-target, draft, block-draft, selector) (did you mean "model"?)`},
		{"capability twice", lines(`schema = 1`, `[target]`, `path = "x"`, `capabilities = ["model", "model"]`), manifests.ErrValue,
			`:4: [target] capabilities lists "model" twice`},
		{"draft capability on a target", lines(`schema = 1`, `[target]`, `path = "x"`, `capabilities = ["model", "selector"]`), manifests.ErrValue,
			`:4: [target] capabilities "selector" is a draft capability; a target declares "model" and optionally "draft-target"`},
		{"target without model", lines(`schema = 1`, `[target]`, `path = "x"`, `capabilities = ["draft-target"]`), manifests.ErrValue,
			`:4: [target] capabilities must include "model": a target declares "model" and optionally "draft-target"`},
		{"empty capabilities", lines(`schema = 1`, `[target]`, `path = "x"`, `capabilities = []`), manifests.ErrValue,
			`:4: [target] capabilities must include "model"`},
		{"target capability on a draft", withTarget(``, `[draft]`, `path = "d"`, `capabilities = ["draft", "model"]`), manifests.ErrValue,
			`:10: [draft] capabilities "model" is a target capability; a draft declares "draft", optionally "block-draft", and "selector" with "block-draft"`},
		{"draft without draft", withTarget(``, `[draft]`, `path = "d"`, `capabilities = ["block-draft"]`), manifests.ErrValue,
			`:10: [draft] capabilities must include "draft"`},
		{"selector without block-draft", withTarget(``, `[draft]`, `path = "d"`, `capabilities = ["draft", "selector"]`), manifests.ErrValue,
			`:10: [draft] capabilities declares "selector" without "block-draft": a selector is a block draft (model.Selector embeds model.BlockDraft), so declare both`},

		// Values.
		{"dtype alias", withTarget(`dtype = "bf16"`), manifests.ErrValue,
			`:7: [target] dtype "bf16" is not a dtype this program computes in: use "auto", "float32", "bfloat16", "float16" (did you mean "bfloat16"?)`},
		{"dtype misspelt", withTarget(`dtype = "float23"`), manifests.ErrValue, `(did you mean "float32"?)`},
		{"dtype unsupported", withTarget(`dtype = "int8"`), manifests.ErrValue,
			`:7: [target] dtype "int8" is not a dtype this program computes in: use "auto", "float32", "bfloat16", "float16"`},
		{"empty path", lines(`schema = 1`, `[target]`, `path = ""`), manifests.ErrValue,
			`:3: [target] path is empty; give the checkpoint folder, e.g. path = "models/Qwen3.5-4B"`},
		{"NUL in path", lines(`schema = 1`, `[target]`, `path = "models\u0000/x"`), manifests.ErrValue,
			`:3: [target] path "models\x00/x" contains a NUL character`},
		{"control character in path", lines(`schema = 1`, `[target]`, `path = "models\n/x"`), manifests.ErrValue,
			`:3: [target] path "models\n/x" contains the control character U+000A`},
		{"another user's home", lines(`schema = 1`, `[target]`, `path = "~bob/models"`), manifests.ErrValue,
			`:3: [target] path "~bob/models": only "~/" (your own home folder) is expanded; write the path out`},
		{"empty name", lines(`schema = 1`, `name = ""`), manifests.ErrValue,
			`:2: name is empty; remove it to use the file name, or write name = "my-model"`},
		{"control character in name", lines(`schema = 1`, `name = "a\u0007b"`), manifests.ErrValue,
			`:2: name "a\ab" contains the control character U+0007`},
		{"architecture with a space", withTarget(`architecture = "Qwen3 5"`), manifests.ErrValue,
			`:7: [target] architecture "Qwen3 5" contains white space or a control character`},
		{"empty architecture", withTarget(`architecture = ""`), manifests.ErrValue,
			`:7: [target] architecture is empty; remove it to use config.json's architectures[0]`},
		{"repo that is not an id", withTarget(`repo = "https://huggingface.co/Qwen/Qwen3.5-4B"`), manifests.ErrValue,
			`:7: [target] repo "https://huggingface.co/Qwen/Qwen3.5-4B" is not a Hugging Face repository id like "Qwen/Qwen3.5-4B"`},

		// Plugins and checksums.
		{"plugin without sha256", withDraft(`plugin = "acme-dflash3"`), manifests.ErrMissing,
			`:11: [draft] plugin "acme-dflash3" needs sha256 = "<64 lowercase hex digits>": the checksum of the plugin binary (its _SHA256SUM file), checked before it runs`},
		{"sha256 without plugin", withDraft(`sha256 = "` + sha + `"`), manifests.ErrValue,
			`:11: [draft] sha256 is the checksum of a plugin binary, but plugin is not set: add plugin = "<name>" or remove sha256`},
		{"sha256 in capitals", withDraft(`plugin = "acme"`, `sha256 = "`+strings.ToUpper(sha)+`"`), manifests.ErrValue,
			`:12: [draft] sha256 must be lowercase hex; write "` + sha + `"`},
		{"sha256 too short", withDraft(`plugin = "acme"`, `sha256 = "abc123"`), manifests.ErrValue,
			`:12: [draft] sha256 "abc123" is not a SHA-256 checksum: want 64 lowercase hex digits (found 6 characters)`},
		{"sha256 not hex", withDraft(`plugin = "acme"`, `sha256 = "`+strings.Repeat("zz", 32)+`"`), manifests.ErrValue,
			`is not a SHA-256 checksum: want 64 lowercase hex digits (found 64 characters)`},
		{"plugin name with an underscore", withDraft(`plugin = "acme_dflash3"`, `sha256 = "`+sha+`"`), manifests.ErrValue,
			`:11: [draft] plugin "acme_dflash3" is not a plugin name: lowercase letters, digits, '-' and '.'`},

		// Speculation ranges.
		{"max_depth too large", withTarget(`[speculation]`, `max_depth = 65`), manifests.ErrValue,
			`:8: [speculation] max_depth = 65 is out of range: want 0..64 (0 = no cap)`},
		{"max_depth negative", withTarget(`[speculation]`, `max_depth = -1`), manifests.ErrValue,
			`:8: [speculation] max_depth = -1 is out of range: want 0..64 (0 = no cap)`},
		{"selector_depth zero", withTarget(`[speculation]`, `selector_depth = 0`), manifests.ErrValue,
			`:8: [speculation] selector_depth = 0 is out of range: want 1..64`},
		{"selector_depth too large", withTarget(`[speculation]`, `selector_depth = 100`), manifests.ErrValue,
			`:8: [speculation] selector_depth = 100 is out of range: want 1..64`},
		{"confidence_floor of 1", withTarget(`[speculation]`, `confidence_floor = 1`), manifests.ErrValue,
			`:8: [speculation] confidence_floor = 1 is out of range: want 0 <= confidence_floor < 1 (0 verifies every draft)`},
		{"confidence_floor negative", withTarget(`[speculation]`, `confidence_floor = -0.1`), manifests.ErrValue,
			`:8: [speculation] confidence_floor = -0.1 is out of range: want 0 <= confidence_floor < 1 (0 verifies every draft)`},
		{"confidence_floor not a number", withTarget(`[speculation]`, `confidence_floor = nan`), manifests.ErrValue,
			`:8: [speculation] confidence_floor = NaN is out of range: want 0 <= confidence_floor < 1 (0 verifies every draft)`},
		{"confidence_floor as a string", withTarget(`[speculation]`, `confidence_floor = "0.3"`), manifests.ErrType,
			`:8: [speculation] confidence_floor must be a number, not a string ("0.3")`},

		// Sampling ranges.
		{"negative temperature", withTarget(`[sampling]`, `temperature = -0.1`), manifests.ErrValue,
			`:8: [sampling] temperature = -0.1 is out of range: want >= 0 (0 is greedy)`},
		{"nan temperature", withTarget(`[sampling]`, `temperature = nan`), manifests.ErrValue,
			`:8: [sampling] temperature = NaN is not a finite number`},
		{"infinite presence penalty", withTarget(`[sampling]`, `presence_penalty = inf`), manifests.ErrValue,
			`:8: [sampling] presence_penalty = +Inf is not a finite number`},
		{"infinite frequency penalty", withTarget(`[sampling]`, `frequency_penalty = -inf`), manifests.ErrValue,
			`:8: [sampling] frequency_penalty = -Inf is not a finite number`},
		{"negative top_k", withTarget(`[sampling]`, `top_k = -1`), manifests.ErrValue,
			`:8: [sampling] top_k = -1 is out of range: want >= 0 (0 disables top-k)`},
		{"top_p zero", withTarget(`[sampling]`, `top_p = 0`), manifests.ErrValue,
			`:8: [sampling] top_p = 0 is out of range: want 0 < top_p <= 1 (1 disables top-p)`},
		{"top_p above one", withTarget(`[sampling]`, `top_p = 1.5`), manifests.ErrValue,
			`:8: [sampling] top_p = 1.5 is out of range: want 0 < top_p <= 1`},
		{"min_p above one", withTarget(`[sampling]`, `min_p = 1.5`), manifests.ErrValue,
			`:8: [sampling] min_p = 1.5 is out of range: want 0 <= min_p <= 1 (0 disables min-p)`},
		{"negative min_p", withTarget(`[sampling]`, `min_p = -0.5`), manifests.ErrValue, `:8: [sampling] min_p = -0.5 is out of range`},
		{"repeat_penalty zero", withTarget(`[sampling]`, `repeat_penalty = 0`), manifests.ErrValue,
			`:8: [sampling] repeat_penalty = 0 is out of range: want > 0 (1 disables it)`},
		{"repeat_last_n below -1", withTarget(`[sampling]`, `repeat_last_n = -2`), manifests.ErrValue,
			`:8: [sampling] repeat_last_n = -2 is out of range: want >= -1 (-1 = the whole context, 0 disables penalties)`},
		{"max_tokens minus two", withTarget(`[sampling]`, `max_tokens = -2`), manifests.ErrValue,
			`:8: [sampling] max_tokens = -2 is out of range: want >= 1, or -1 to generate until a stop or the end of the context`},
		{"max_tokens zero", withTarget(`[sampling]`, `max_tokens = 0`), manifests.ErrValue,
			`:8: [sampling] max_tokens = 0 is out of range: want >= 1`},
		{"max_tokens huge", withTarget(`[sampling]`, `max_tokens = 9999999999`), manifests.ErrValue,
			`:8: [sampling] max_tokens = 9999999999 is out of range: want at most 2147483647`},
		{"negative stop token", withTarget(`[sampling]`, `stop = ["a", -1]`), manifests.ErrValue,
			`:8: [sampling] stop [1] = -1 is not a token id: want 0 <= id < the vocabulary size`},
		{"empty stop string", withTarget(`[sampling]`, `stop = [""]`), manifests.ErrValue,
			`:8: [sampling] stop [0] is an empty string; a stop string needs at least one character`},

		// Lines are those of the key, also after multi-line values and in
		// inline tables and dotted keys.
		{"line after a multi-line array", lines(`schema = 1`, `[target]`, `path = "x"`, `capabilities = [`, `  "model",`, `]`, `dtype = "fp8"`),
			manifests.ErrValue, `:7: [target] dtype "fp8"`},
		{"inline table key", lines(`schema = 1`, `target = { path = "x", capabilities = ["model"], dtype = 5 }`), manifests.ErrType,
			`:2: [target] dtype must be a string`},
		{"dotted key", lines(`schema = 1`, `target.path = "x"`, `target.capabilities = ["model"]`, `target.dtpye = "float32"`),
			manifests.ErrUnknownKey, `:4: unknown key "dtpye" in [target] (did you mean "dtype"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := manifests.Parse("m.toml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s\n%+v", tt.doc, m)
			}
			var me *manifests.Error
			if !errors.As(err, &me) {
				t.Fatalf("error %T is not a *manifests.Error: %v", err, err)
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("error kind = %v; want %v", me.Kind, tt.kind)
			}
			want := "manifest m.toml" + tt.want
			if !strings.HasPrefix(tt.want, ":") && !strings.HasPrefix(tt.want, ": ") {
				want = tt.want // a substring anywhere
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error:\n  %s\nwant it to contain:\n  %s", err, want)
			}
		})
	}
}

func TestDecodeValid(t *testing.T) {
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	sha := strings.Repeat("0f", 32)
	doc := lines(
		`schema = 1`,
		``,
		`[target]`,
		`path = "models/T"`,
		`architecture = "Qwen3_5ForCausalLM"`,
		`capabilities = ["draft-target", "model"]`,
		`dtype = "bfloat16"`,
		`allow_slow_dtype = true`,
		`repo = "Qwen/Qwen3.5-4B"`,
		``,
		`[draft]`,
		`path = "~/models/D"`,
		`capabilities = ["selector", "draft", "block-draft"]`,
		`plugin = "acme-dflash3"`,
		`sha256 = "`+sha+`"`,
		`weights = false`,
		``,
		`[speculation]`,
		`enabled = false`,
		`max_depth = 0`,
		`selector_depth = 64`,
		`confidence_floor = 0.45`,
		``,
		`[sampling]`,
		`temperature = 1`,
		`top_k = 0`,
		`top_p = 1`,
		`min_p = 0.05`,
		`repeat_penalty = 1.1`,
		`presence_penalty = -0.5`,
		`frequency_penalty = 0.25`,
		`repeat_last_n = -1`,
		`seed = -42`,
		`max_tokens = 100`,
		`stop = [7, "</s>", 0, "\n\n"]`,
	)
	m, err := manifests.Parse(filepath.Join("sub", "my-model.toml"), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v; want %v", what, got, want)
		}
	}
	check("Name (from the file name)", m.Name, "my-model")
	check("Dir", m.Dir, filepath.Join(wd, "sub"))
	check("Schema", m.Schema, 1)
	check("Target.Dir", m.Target.Dir, filepath.Join(wd, "sub", "models", "T"))
	check("Target.Path", m.Target.Path, "models/T")
	check("Target.Architecture", m.Target.Architecture, "Qwen3_5ForCausalLM")
	check("Target.Capabilities (canonical order)", m.Target.Capabilities.String(), "model, draft-target")
	check("Target.DType", m.Target.DType, manifests.DTypeBFloat16)
	check("Target.AllowSlowDType", m.Target.AllowSlowDType, true)
	check("Target.Repo", m.Target.Repo, "Qwen/Qwen3.5-4B")
	check("Draft.Dir (~ expanded)", m.Draft.Dir, filepath.Join(home, "models", "D"))
	check("Draft.Capabilities", m.Draft.Capabilities.String(), "draft, block-draft, selector")
	check("Draft.Plugin", m.Draft.Plugin, "acme-dflash3")
	check("Draft.SHA256", m.Draft.SHA256, sha)
	check("Draft.Weightless", m.Draft.Weightless, true)
	if f := m.Speculation.ConfidenceFloor; f == nil || *f != 0.45 {
		t.Errorf("Speculation.ConfidenceFloor = %v; want 0.45", f)
	}
	m.Speculation.ConfidenceFloor = nil
	check("Speculation", m.Speculation, manifests.Speculation{Enabled: false, MaxDepth: 0, SelectorDepth: 64})
	s := m.Sampling
	check("Temperature (integer accepted)", *s.Temperature, 1.0)
	check("TopK", *s.TopK, 0)
	check("TopP", *s.TopP, 1.0)
	check("MinP", *s.MinP, 0.05)
	check("RepeatPenalty", *s.RepeatPenalty, 1.1)
	check("PresencePenalty", *s.PresencePenalty, -0.5)
	check("FrequencyPenalty", *s.FrequencyPenalty, 0.25)
	check("RepeatLastN", *s.RepeatLastN, -1)
	check("Seed", *s.Seed, int64(-42))
	check("MaxTokens", *s.MaxTokens, 100)
	if !slices.Equal(s.StopTokens, []int{7, 0}) || !slices.Equal(s.StopStrings, []string{"</s>", "\n\n"}) {
		t.Errorf("stop = %v %q", s.StopTokens, s.StopStrings)
	}
}

func TestDecodeDefaults(t *testing.T) {
	abs := filepath.Join(t.TempDir(), "ckpt")
	m, err := manifests.Parse("/manifests/x.toml", []byte(lines(`schema = 1`, `[target]`, `path = "`+abs+`"`, `capabilities = ["model"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "x" || m.Draft != nil || m.Target.DType != manifests.DTypeAuto || m.Target.AllowSlowDType ||
		m.Target.Architecture != "" || m.Target.Dir != abs {
		t.Errorf("defaults: %+v", m)
	}
	if m.Speculation != (manifests.Speculation{Enabled: true, MaxDepth: 0, SelectorDepth: manifests.DefaultSelectorDepth}) {
		t.Errorf("speculation defaults = %+v", m.Speculation)
	}
	if !reflectZero(m.Sampling) {
		t.Errorf("sampling defaults = %+v; want all unset", m.Sampling)
	}
	if !m.Target.Capabilities.Contains(model.CapModel) {
		t.Error("capabilities lost")
	}
}

func reflectZero(s manifests.Sampling) bool {
	return s.Temperature == nil && s.TopK == nil && s.TopP == nil && s.MinP == nil && s.RepeatPenalty == nil &&
		s.PresencePenalty == nil && s.FrequencyPenalty == nil && s.RepeatLastN == nil && s.Seed == nil &&
		s.MaxTokens == nil && s.StopTokens == nil && s.StopStrings == nil
}

func TestDecodeForms(t *testing.T) {
	// Inline tables and dotted keys are TOML too.
	for name, doc := range map[string]string{
		"inline table": lines(`schema = 1`, `target = { path = "x", capabilities = ["model"] }`),
		"dotted keys":  lines(`schema = 1`, `target.path = "x"`, `target.capabilities = ["model"]`),
		"comments":     lines(`# a manifest`, `schema = 1 # version`, `[target] # the model`, `path = "x" # here`, `capabilities = ["model"]`),
	} {
		t.Run(name, func(t *testing.T) {
			m, err := manifests.Parse("m.toml", []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if m.Target.Path != "x" {
				t.Errorf("path = %q", m.Target.Path)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	t.Run("missing file", func(t *testing.T) {
		_, err := manifests.Load(filepath.Join(dir, "nope.toml"))
		if !errors.Is(err, manifests.ErrRead) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Load = %v", err)
		}
		if !strings.HasPrefix(err.Error(), "manifest "+filepath.Join(dir, "nope.toml")+": open ") {
			t.Errorf("message = %s", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		p := filepath.Join(dir, "big.toml")
		big := withTarget("# " + strings.Repeat("x", manifests.MaxSize))
		if err := os.WriteFile(p, []byte(big), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := manifests.Load(p)
		if !errors.Is(err, manifests.ErrValue) || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
			t.Fatalf("Load = %v", err)
		}
	})
	t.Run("relative paths are relative to the manifest's folder", func(t *testing.T) {
		p := filepath.Join(dir, "a", "m.toml")
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(withTarget()), 0o644)
		m, err := manifests.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(dir, "a", "models", "T"); m.Target.Dir != want {
			t.Errorf("Dir = %s; want %s", m.Target.Dir, want)
		}
		if m.Path != p {
			t.Errorf("Path = %s", m.Path)
		}
	})
}
