package manifests

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/specula-dev/specula/model"
	"github.com/specula-dev/specula/registry"
	"github.com/specula-dev/specula/sample"
)

// MaxSize bounds a manifest file: real ones are a few hundred bytes.
const MaxSize = 1 << 20

// Load reads and decodes the manifest at path: strict TOML decoding, then
// every check that needs nothing but the file (types, ranges, required keys,
// capability names and kinds, path syntax, plugin checksum syntax). It does
// not look at checkpoints; Resolve does. Errors are *Error values.
func Load(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Kind: ErrRead, Msg: err.Error(), Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, &Error{File: path, Kind: ErrRead, Msg: err.Error(), Err: err}
	}
	return Parse(path, data)
}

// Parse decodes data as the content of the manifest file at path, as Load
// does. path names the file in messages and anchors relative checkpoint
// paths; it is not read.
func Parse(path string, data []byte) (*Manifest, error) {
	d := &decoder{file: path, m: &Manifest{Path: path, lines: map[string]int{}}}
	if len(data) > MaxSize {
		return nil, d.errorf(0, ErrValue, "the file is larger than %d bytes; a manifest is a few lines of TOML", MaxSize)
	}
	if !utf8.Valid(data) {
		return nil, d.errorf(0, ErrSyntax, "invalid TOML: the file is not UTF-8 text")
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, d.errorf(0, ErrRead, "cannot resolve the manifest's folder: %v", err)
	}
	d.m.Dir = dir

	var root map[string]toml.Primitive
	md, err := toml.Decode(string(data), &root)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			// The parser's line is one too far when the offending
			// character is the newline itself; its byte offset is exact.
			line := pe.Position.Line
			if s := pe.Position.Start; s >= 0 && s <= len(data) {
				line = bytes.Count(data[:s], []byte("\n")) + 1
			}
			return nil, d.errorf(line, ErrSyntax, "invalid TOML: %s", pe.Message)
		}
		return nil, d.errorf(0, ErrSyntax, "invalid TOML: %v", err)
	}
	d.md = &md
	if err := d.top(root); err != nil {
		return nil, err
	}
	return d.m, nil
}

// decoder walks the decoded document against the schema. Each table is
// decoded into primitives, key by key in file order, so that every key is
// matched exactly (TOML keys are case-sensitive; BurntSushi's struct
// decoding is not), and every problem is reported at its key's line.
type decoder struct {
	file string
	md   *toml.MetaData
	m    *Manifest
}

func (d *decoder) errorf(line int, k error, format string, args ...any) *Error {
	return &Error{File: d.file, Line: line, Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// problem is what a field setter finds wrong with a value; the decoder adds
// the file, line, table and key. msg reads after "[table] key ", e.g. "must
// be a string, not an integer (16)".
type problem struct {
	kind error
	msg  string
}

func (p *problem) Error() string { return p.msg }

func typeProblem(want string, v any) *problem {
	return &problem{ErrType, fmt.Sprintf("must be %s, not %s (%s)", want, tomlType(v), short(v))}
}

func valueProblem(format string, args ...any) *problem {
	return &problem{ErrValue, fmt.Sprintf(format, args...)}
}

// field is one key of a table's schema.
type field struct {
	key      string
	required bool
	// set checks v, the decoded value, and stores it. It returns a
	// *problem, or an *Error for a sub-table.
	set func(v any, p toml.Primitive) error
	// hint follows the message when a required key is missing.
	hint string
}

// schemaTables are the top-level tables, for "did you mean" suggestions.
var schemaTables = []string{"target", "draft", "speculation", "sampling"}

// misplaced gives advice for keys that belong elsewhere, by table and key.
var misplaced = map[string]string{
	"draft.dtype":            "the draft computes in the target's dtype; set dtype in [target]",
	"draft.allow_slow_dtype": "the draft computes in the target's dtype; set allow_slow_dtype in [target]",
	"target.plugin":          "plugins serve drafts; put plugin and sha256 in [draft]",
	"target.sha256":          "plugins serve drafts; put plugin and sha256 in [draft]",
	"target.weights":         "only a draft can be weightless (weights = false, for prompt-lookup drafters)",
	"path":                   "path belongs in [target] or [draft]",
	"architecture":           "architecture belongs in [target] or [draft]",
	"capabilities":           "capabilities belongs in [target] or [draft]",
	"dtype":                  "dtype belongs in [target]",
	"max_depth":              "max_depth belongs in [speculation]",
	"temperature":            "temperature belongs in [sampling]",
	"speculation.depth":      `the depth controller's cap is max_depth; a selector draft's fixed depth is selector_depth`,
}

// table decodes the keys of one table (name "" for the top level) against
// its schema, in file order, then reports the first required key missing.
func (d *decoder) table(name string, headerLine int, prims map[string]toml.Primitive, fields []field) error {
	type entry struct {
		key  string
		line int
	}
	entries := make([]entry, 0, len(prims))
	for k, p := range prims {
		entries = append(entries, entry{k, d.lineOf(name, k, p)})
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if c := cmp.Compare(a.line, b.line); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	seen := map[string]bool{}
	for _, e := range entries {
		f := findField(fields, e.key)
		if f == nil {
			return d.unknownKey(name, e.key, e.line, prims[e.key], fields)
		}
		seen[e.key] = true
		var v any
		if err := d.md.PrimitiveDecode(prims[e.key], &v); err != nil {
			return d.errorf(e.line, ErrSyntax, "invalid TOML: %v", err)
		}
		if err := f.set(v, prims[e.key]); err != nil {
			var p *problem
			if errors.As(err, &p) {
				return d.errorf(e.line, p.kind, "%s%s %s", prefix(name), e.key, p.msg)
			}
			return err
		}
	}
	for _, f := range fields {
		if f.required && !seen[f.key] {
			if name == "" {
				return d.errorf(0, ErrMissing, "missing required key %s%s", f.key, f.hint)
			}
			return d.errorf(headerLine, ErrMissing, "[%s] is missing the required key %s%s", name, f.key, f.hint)
		}
	}
	return nil
}

func findField(fields []field, key string) *field {
	for i := range fields {
		if fields[i].key == key {
			return &fields[i]
		}
	}
	return nil
}

// prefix is "[name] " for a table, "" for the top level.
func prefix(name string) string {
	if name == "" {
		return ""
	}
	return "[" + name + "] "
}

func (d *decoder) unknownKey(table, key string, line int, p toml.Primitive, fields []field) error {
	var known []string
	for _, f := range fields {
		known = append(known, f.key)
	}
	where := " in [" + table + "]"
	if table == "" {
		where = " at the top level"
		var v any
		if d.md.PrimitiveDecode(p, &v) == nil {
			if _, isTable := v.(map[string]any); isTable {
				msg := fmt.Sprintf("unknown table [%s]", key)
				if s := suggest(key, schemaTables); s != "" {
					msg += fmt.Sprintf(" (did you mean [%s]?)", s)
				} else {
					msg += " (tables: [target], [draft], [speculation], [sampling])"
				}
				return d.errorf(line, ErrUnknownKey, "%s", msg)
			}
		}
	}
	msg := fmt.Sprintf("unknown key %q%s", key, where)
	qualified := key
	if table != "" {
		qualified = table + "." + key
	}
	switch s := suggest(key, known); {
	case s != "" && strings.EqualFold(s, key):
		msg += fmt.Sprintf(" (keys are case-sensitive: did you mean %q?)", s)
	case s != "":
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	case misplaced[qualified] != "":
		msg += " (" + misplaced[qualified] + ")"
	}
	return d.errorf(line, ErrUnknownKey, "%s", msg)
}

// errLocate is returned by locator to make the TOML decoder report the
// position of the key being decoded.
var errLocate = errors.New("locate")

// locator is a toml.Unmarshaler that always fails: decoding a primitive into
// it yields a toml.ParseError whose Position is that of the primitive's key.
type locator struct{}

func (*locator) UnmarshalTOML(any) error { return errLocate }

// lineOf returns the line of key in table and records it in the manifest's
// line map. Keys of implicit tables (defined by dotted keys) have no
// position of their own; they take that of their first child.
func (d *decoder) lineOf(table, key string, p toml.Primitive) int {
	name := key
	if table != "" {
		name = table + "." + key
	}
	line := 0
	var pe toml.ParseError
	if err := d.md.PrimitiveDecode(p, &locator{}); errors.As(err, &pe) {
		line = pe.Position.Line
	}
	if line == 0 {
		var children map[string]toml.Primitive
		if d.md.PrimitiveDecode(p, &children) == nil {
			for k, c := range children {
				if l := d.lineOf(name, k, c); l > 0 && (line == 0 || l < line) {
					line = l
				}
			}
		}
	}
	if line > 0 {
		d.m.lines[name] = line
	}
	return line
}

// top decodes the top level: the schema first (a newer manifest's keys
// would otherwise read as unknown), then everything else in file order.
func (d *decoder) top(root map[string]toml.Primitive) error {
	m := d.m
	schema, ok := root["schema"]
	if !ok {
		return d.errorf(0, ErrSchema, "missing schema = %d (put it on the first line of the manifest)", SchemaVersion)
	}
	line := d.lineOf("", "schema", schema)
	var v any
	if err := d.md.PrimitiveDecode(schema, &v); err != nil {
		return d.errorf(line, ErrSyntax, "invalid TOML: %v", err)
	}
	if _, isFloat := v.(float64); isFloat {
		return d.errorf(line, ErrSchema, "schema must be the integer %d, not %s (%s): this specula reads schema %d", SchemaVersion, tomlType(v), short(v), SchemaVersion)
	}
	if n, isInt := v.(int64); !isInt || n != SchemaVersion {
		return d.errorf(line, ErrSchema, "schema = %s: this specula reads schema %d", short(v), SchemaVersion)
	}
	m.Schema = SchemaVersion
	m.Speculation = Speculation{Enabled: true, SelectorDepth: DefaultSelectorDepth}

	var haveTarget bool
	err := d.table("", 0, root, []field{
		{key: "schema", set: func(any, toml.Primitive) error { return nil }},
		{key: "name", set: str(&m.Name, checkName)},
		{key: "target", set: d.subTable("target", func(line int, prims map[string]toml.Primitive) error {
			haveTarget = true
			return d.target(line, prims)
		})},
		{key: "draft", set: d.subTable("draft", func(line int, prims map[string]toml.Primitive) error {
			m.Draft = &Draft{}
			return d.draft(line, prims)
		})},
		{key: "speculation", set: d.subTable("speculation", d.speculation)},
		{key: "sampling", set: d.subTable("sampling", d.sampling)},
	})
	if err != nil {
		return err
	}
	if !haveTarget {
		return d.errorf(0, ErrMissing, "missing table [target]: every manifest names the target checkpoint (path and capabilities)")
	}
	// Every key was matched against the schema above; this cross-check
	// keeps the walk honest should the schema grow a way to skip keys.
	if left := d.md.Undecoded(); len(left) > 0 {
		k := left[0]
		return d.errorf(m.line(strings.Join(k, ".")), ErrUnknownKey, "unknown key %q", k.String())
	}
	if m.Name == "" {
		m.Name = strings.TrimSuffix(filepath.Base(m.Path), filepath.Ext(m.Path))
	}
	return nil
}

// subTable returns the setter of a key that must hold a table; decode gets
// the table's header line and its keys as primitives.
func (d *decoder) subTable(name string, decode func(line int, prims map[string]toml.Primitive) error) func(any, toml.Primitive) error {
	return func(v any, p toml.Primitive) error {
		if _, ok := v.(map[string]any); !ok {
			return &problem{ErrType, fmt.Sprintf("must be a table ([%s]), not %s (%s)", name, tomlType(v), short(v))}
		}
		var prims map[string]toml.Primitive
		if err := d.md.PrimitiveDecode(p, &prims); err != nil {
			return d.errorf(d.m.line(name), ErrSyntax, "invalid TOML: %v", err)
		}
		return decode(d.m.line(name), prims)
	}
}

func (d *decoder) checkpointFields(c *Checkpoint, kind registry.Kind) []field {
	example := `["model", "draft-target"]`
	if kind == registry.KindDraft {
		example = `["draft", "block-draft"]`
	}
	return []field{
		{key: "path", required: true, set: str(&c.Path, d.checkPath(c)),
			hint: " (the checkpoint folder, relative to this manifest's folder)"},
		{key: "architecture", set: str(&c.Architecture, checkArchitecture)},
		{key: "capabilities", required: true, set: capabilities(&c.Capabilities, kind),
			hint: fmt.Sprintf(" (what the run may use, e.g. capabilities = %s)", example)},
		{key: "repo", set: str(&c.Repo, checkRepo)},
	}
}

func (d *decoder) target(line int, prims map[string]toml.Primitive) error {
	t := &d.m.Target
	t.DType = DTypeAuto
	fields := append(d.checkpointFields(&t.Checkpoint, registry.KindTarget),
		field{key: "dtype", set: dtype(&t.DType)},
		field{key: "allow_slow_dtype", set: boolean(&t.AllowSlowDType)},
	)
	return d.table("target", line, prims, fields)
}

func (d *decoder) draft(line int, prims map[string]toml.Primitive) error {
	dr := d.m.Draft
	fields := append(d.checkpointFields(&dr.Checkpoint, registry.KindDraft),
		field{key: "plugin", set: str(&dr.Plugin, checkPluginName)},
		field{key: "sha256", set: str(&dr.SHA256, checkSHA256)},
		field{key: "weights", set: func(v any, p toml.Primitive) error {
			has := true
			if err := boolean(&has)(v, p); err != nil {
				return err
			}
			dr.Weightless = !has
			return nil
		}},
	)
	if err := d.table("draft", line, prims, fields); err != nil {
		return err
	}
	switch {
	case dr.Plugin != "" && dr.SHA256 == "":
		return d.errorf(d.m.line("draft.plugin"), ErrMissing,
			`[draft] plugin %q needs sha256 = "<64 lowercase hex digits>": the checksum of the plugin binary (its _SHA256SUM file), checked before it runs`, dr.Plugin)
	case dr.Plugin == "" && dr.SHA256 != "":
		return d.errorf(d.m.line("draft.sha256"), ErrValue,
			`[draft] sha256 is the checksum of a plugin binary, but plugin is not set: add plugin = "<name>" or remove sha256`)
	}
	return nil
}

func (d *decoder) speculation(line int, prims map[string]toml.Primitive) error {
	s := &d.m.Speculation
	return d.table("speculation", line, prims, []field{
		{key: "enabled", set: boolean(&s.Enabled)},
		{key: "max_depth", set: integer(&s.MaxDepth, 0, MaxDepthLimit, " (0 = no cap)")},
		{key: "selector_depth", set: integer(&s.SelectorDepth, 1, MaxDepthLimit, "")},
		{key: "confidence_floor", set: optFloat(&s.ConfidenceFloor, checkConfidenceFloor)},
	})
}

// checkConfidenceFloor accepts a probability below 1 (a floor of 1 would
// cut every proposal to its first draft, which max_depth = 1 says plainly).
func checkConfidenceFloor(x float64) error {
	if !(x >= 0 && x < 1) {
		return fmt.Errorf("= %v is out of range: want 0 <= confidence_floor < 1 (0 verifies every draft)", x)
	}
	return nil
}

func (d *decoder) sampling(line int, prims map[string]toml.Primitive) error {
	s := &d.m.Sampling
	// The ranges are package sample's, shared with the command line and the
	// HTTP APIs, so a setting means the same and reads the same everywhere.
	return d.table("sampling", line, prims, []field{
		{key: "temperature", set: optFloat(&s.Temperature, sample.CheckTemperature[float64])},
		{key: "top_k", set: optInt(&s.TopK, sample.CheckTopK[int64])},
		{key: "top_p", set: optFloat(&s.TopP, sample.CheckTopP[float64])},
		{key: "min_p", set: optFloat(&s.MinP, sample.CheckMinP[float64])},
		{key: "repeat_penalty", set: optFloat(&s.RepeatPenalty, sample.CheckRepeatPenalty[float64])},
		{key: "presence_penalty", set: optFloat(&s.PresencePenalty, sample.CheckPresencePenalty[float64])},
		{key: "frequency_penalty", set: optFloat(&s.FrequencyPenalty, sample.CheckFrequencyPenalty[float64])},
		{key: "repeat_last_n", set: optInt(&s.RepeatLastN, sample.CheckRepeatLastN[int64])},
		{key: "seed", set: func(v any, _ toml.Primitive) error {
			n, ok := v.(int64)
			if !ok {
				return typeProblem("an integer", v)
			}
			s.Seed = &n
			return nil
		}},
		{key: "max_tokens", set: optInt(&s.MaxTokens, sample.CheckMaxTokens[int64])},
		{key: "stop", set: stopList(s)},
	})
}

// settingProblem turns a package sample range error into the manifest's
// words: "[sampling] top_p = 2 is out of range: want ...".
func settingProblem(err error) *problem {
	var fe *sample.FieldError
	if errors.As(err, &fe) {
		return valueProblem("= %s %s", fe.Value, fe.Reason(fe.Field))
	}
	return valueProblem("%v", err)
}

// Setters. Each returns a field.set that type-checks the decoded value,
// range-checks it and stores it.

func str(dst *string, check func(string) *problem) func(any, toml.Primitive) error {
	return func(v any, _ toml.Primitive) error {
		s, ok := v.(string)
		if !ok {
			return typeProblem("a string", v)
		}
		if check != nil {
			if p := check(s); p != nil {
				return p
			}
		}
		*dst = s
		return nil
	}
}

func boolean(dst *bool) func(any, toml.Primitive) error {
	return func(v any, _ toml.Primitive) error {
		b, ok := v.(bool)
		if !ok {
			return typeProblem("true or false", v)
		}
		*dst = b
		return nil
	}
}

func integer(dst *int, lo, hi int64, note string) func(any, toml.Primitive) error {
	return func(v any, _ toml.Primitive) error {
		n, ok := v.(int64)
		if !ok {
			return typeProblem("an integer", v)
		}
		if n < lo || n > hi {
			if hi == math.MaxInt32 {
				return valueProblem("= %d is out of range: want >= %d%s", n, lo, note)
			}
			return valueProblem("= %d is out of range: want %d..%d%s", n, lo, hi, note)
		}
		*dst = int(n)
		return nil
	}
}

// optInt accepts TOML integers that check accepts.
func optInt(dst **int, check func(int64) error) func(any, toml.Primitive) error {
	return func(v any, _ toml.Primitive) error {
		n, ok := v.(int64)
		if !ok {
			return typeProblem("an integer", v)
		}
		if err := check(n); err != nil {
			return settingProblem(err)
		}
		i := int(n)
		*dst = &i
		return nil
	}
}

// optFloat accepts TOML floats and integers (temperature = 1) that check
// accepts (the checks refuse NaN and infinities).
func optFloat(dst **float64, check func(float64) error) func(any, toml.Primitive) error {
	return func(v any, _ toml.Primitive) error {
		var x float64
		switch n := v.(type) {
		case float64:
			x = n
		case int64:
			x = float64(n)
		default:
			return typeProblem("a number", v)
		}
		if err := check(x); err != nil {
			return settingProblem(err)
		}
		*dst = &x
		return nil
	}
}

func dtypeNames() []string {
	names := make([]string, len(dtypes))
	for i, t := range dtypes {
		names[i] = string(t)
	}
	return names
}

func dtype(dst *DType) func(any, toml.Primitive) error {
	aliases := map[string]DType{"bf16": DTypeBFloat16, "fp32": DTypeFloat32, "f32": DTypeFloat32,
		"fp16": DTypeFloat16, "f16": DTypeFloat16, "half": DTypeFloat16, "float": DTypeFloat32}
	return str((*string)(dst), func(s string) *problem {
		if slices.Contains(dtypes, DType(s)) {
			return nil
		}
		msg := fmt.Sprintf("%q is not a dtype this program computes in: use %s", s, strings.Join(quoteAll(dtypeNames()), ", "))
		if a, ok := aliases[strings.ToLower(s)]; ok {
			msg += fmt.Sprintf(" (did you mean %q?)", a)
		} else if sug := suggest(s, dtypeNames()); sug != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", sug)
		}
		return valueProblem("%s", msg)
	})
}

// capabilities decodes a capability list and checks it suits kind: a target
// declares "model" and optionally "draft-target"; a draft declares "draft",
// optionally "block-draft", and "selector" only with "block-draft".
func capabilities(dst *model.Capabilities, kind registry.Kind) func(any, toml.Primitive) error {
	return func(v any, _ toml.Primitive) error {
		list, ok := v.([]any)
		if !ok {
			return typeProblem("an array of capability names", v)
		}
		var names []string
		for _, c := range model.AllCapabilities {
			names = append(names, string(c))
		}
		var out model.Capabilities
		for i, e := range list {
			s, ok := e.(string)
			if !ok {
				return &problem{ErrType, fmt.Sprintf("[%d] must be a string, not %s (%s)", i, tomlType(e), short(e))}
			}
			c, err := model.ParseCapability(s)
			if err != nil {
				msg := fmt.Sprintf("%q is not a capability (known: %s)", s, strings.Join(names, ", "))
				if sug := suggest(s, names); sug != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", sug)
				}
				return valueProblem("%s", msg)
			}
			if out.Contains(c) {
				return valueProblem("lists %q twice", c)
			}
			if registry.KindOf(c) != kind {
				return valueProblem("%q is a %s capability; %s", c, registry.KindOf(c), kindRule(kind))
			}
			out = append(out, c)
		}
		base := model.CapModel
		if kind == registry.KindDraft {
			base = model.CapDraft
		}
		if !out.Contains(base) {
			return valueProblem("must include %q: %s", base, kindRule(kind))
		}
		if out.Contains(model.CapSelector) && !out.Contains(model.CapBlockDraft) {
			return valueProblem(`declares "selector" without "block-draft": a selector is a block draft (model.Selector embeds model.BlockDraft), so declare both`)
		}
		slices.SortFunc(out, func(a, b model.Capability) int {
			return slices.Index(model.AllCapabilities, a) - slices.Index(model.AllCapabilities, b)
		})
		*dst = out
		return nil
	}
}

func kindRule(kind registry.Kind) string {
	if kind == registry.KindTarget {
		return `a target declares "model" and optionally "draft-target"`
	}
	return `a draft declares "draft", optionally "block-draft", and "selector" with "block-draft"`
}

func stopList(s *Sampling) func(any, toml.Primitive) error {
	return func(v any, _ toml.Primitive) error {
		list, ok := v.([]any)
		if !ok {
			return typeProblem("an array of token ids and strings", v)
		}
		var tokens []int
		var texts []string
		for i, e := range list {
			switch x := e.(type) {
			case int64:
				if err := sample.CheckStopID(x, 0); err != nil {
					return valueProblem("[%d] = %d %s", i, x, err.(*sample.FieldError).Reason("stop"))
				}
				tokens = append(tokens, int(x))
			case string:
				if err := sample.CheckStopString(x); err != nil {
					return valueProblem("[%d] %s", i, err.(*sample.FieldError).Reason("stop"))
				}
				texts = append(texts, x)
			default:
				return &problem{ErrType, fmt.Sprintf("[%d] must be a token id (integer) or a string, not %s (%s)", i, tomlType(e), short(e))}
			}
		}
		s.StopTokens, s.StopStrings = tokens, texts
		return nil
	}
}

// Value checks.

func checkName(s string) *problem {
	if s == "" {
		return valueProblem(`is empty; remove it to use the file name, or write name = "my-model"`)
	}
	if p := controlProblem(s); p != "" {
		return valueProblem("%q %s", s, p)
	}
	return nil
}

func controlProblem(s string) string {
	for _, r := range s {
		if r == 0 {
			return "contains a NUL character"
		}
		if unicode.IsControl(r) {
			return fmt.Sprintf("contains the control character %U", r)
		}
	}
	return ""
}

func checkArchitecture(s string) *problem {
	if s == "" {
		return valueProblem(`is empty; remove it to use config.json's architectures[0]`)
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return valueProblem("%q contains white space or a control character; architectures are class names like \"Qwen3_5ForCausalLM\"", s)
		}
	}
	return nil
}

var (
	repoPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)
	pluginPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)
	sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func checkRepo(s string) *problem {
	if !repoPattern.MatchString(s) {
		return valueProblem(`%q is not a Hugging Face repository id like "Qwen/Qwen3.5-4B"`, s)
	}
	return nil
}

func checkPluginName(s string) *problem {
	if !pluginPattern.MatchString(s) {
		return valueProblem(`%q is not a plugin name: lowercase letters, digits, '-' and '.', as in the binary's file name specula-plugin-<name>_v<version>_...`, s)
	}
	return nil
}

func checkSHA256(s string) *problem {
	if sha256Pattern.MatchString(s) {
		return nil
	}
	if sha256Pattern.MatchString(strings.ToLower(s)) {
		return valueProblem("must be lowercase hex; write %q", strings.ToLower(s))
	}
	return valueProblem("%s is not a SHA-256 checksum: want 64 lowercase hex digits (found %d characters)", short(s), utf8.RuneCountInString(s))
}

// checkPath checks a checkpoint path's syntax and resolves it into c.Dir:
// relative to the manifest's folder, absolute, or under the home folder with
// "~/". It does not touch the file system beyond asking for the home folder.
func (d *decoder) checkPath(c *Checkpoint) func(string) *problem {
	return func(s string) *problem {
		if s == "" {
			return valueProblem(`is empty; give the checkpoint folder, e.g. path = "models/Qwen3.5-4B"`)
		}
		if p := controlProblem(s); p != "" {
			return valueProblem("%q %s", s, p)
		}
		p := s
		if s == "~" || strings.HasPrefix(s, "~/") {
			home, err := os.UserHomeDir()
			if err != nil {
				return valueProblem("%q starts with ~ but the home folder is unknown (%v); write the path out", s, err)
			}
			p = filepath.Join(home, strings.TrimPrefix(s, "~"))
		} else if strings.HasPrefix(s, "~") {
			return valueProblem(`%q: only "~/" (your own home folder) is expanded; write the path out`, s)
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(d.m.Dir, p)
		}
		c.Dir = filepath.Clean(p)
		return nil
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// tomlType names the TOML type of a decoded value, with its article.
func tomlType(v any) string {
	switch v.(type) {
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date/time"
	}
	return fmt.Sprintf("a %T", v)
}

// short renders a decoded value for a message, cut to a readable length.
func short(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = fmt.Sprintf("%q", x)
	case map[string]any:
		s = "{...}"
	case []map[string]any:
		s = "[[...]]"
	case float64:
		// As written: 7.0 stays a float to the reader, not "7".
		s = strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eIN") {
			s += ".0"
		}
	default:
		s = fmt.Sprint(x)
	}
	const maxLen = 40
	if utf8.RuneCountInString(s) > maxLen {
		s = string([]rune(s)[:maxLen]) + "..."
	}
	return s
}
