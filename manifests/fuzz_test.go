package manifests_test

import (
	"bytes"
	"errors"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/specula-dev/specula/manifests"
	"github.com/specula-dev/specula/model"
)

// FuzzDecode feeds arbitrary bytes to Parse: it must never panic, every
// refusal must be a *manifests.Error with a kind and a line inside the file,
// and every accepted manifest must satisfy the schema's rules.
func FuzzDecode(f *testing.F) {
	for _, p := range examples(f) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		withDraft(`plugin = "acme"`, `sha256 = "`+strings.Repeat("ab", 32)+`"`, `[speculation]`, `max_depth = 64`, `selector_depth = 1`),
		withTarget(`[sampling]`, `temperature = 0.5`, `top_p = 1`, `min_p = 0`, `stop = [0, "x"]`, `seed = -9223372036854775808`),
		lines(`schema = 1`, `target = { path = "~/m", capabilities = ["model"], dtype = "float16" }`),
		lines(`schema = 1`, `target.path = "x"`, `target.capabilities = ["model"]`),
		lines(`schema = 1`, `[target]`, `Path = "x"`),
		lines(`schema = 1`, `[[target]]`),
		lines(`schema = 2`),
		"schema = 1\n[target\n",
		"\xff\xfe",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := manifests.Parse("fuzz.toml", data)
		if err != nil {
			checkRefusal(t, data, err)
			return
		}
		checkAccepted(t, m)
	})
}

var linePrefix = regexp.MustCompile(`^manifest fuzz\.toml(?::(\d+))?: `)

func checkRefusal(t *testing.T, data []byte, err error) {
	var me *manifests.Error
	if !errors.As(err, &me) || me.Kind == nil {
		t.Fatalf("refusal %T %v is not a *manifests.Error with a kind", err, err)
	}
	sub := linePrefix.FindStringSubmatch(err.Error())
	if sub == nil {
		t.Fatalf("message %q does not start with the file", err)
	}
	if sub[1] != "" {
		n, _ := strconv.Atoi(sub[1])
		if n < 1 || n > bytes.Count(data, []byte("\n"))+1 {
			t.Fatalf("line %d outside the %d-line file: %v", n, bytes.Count(data, []byte("\n"))+1, err)
		}
	}
}

// checkAccepted restates the schema's rules independently of the decoder.
func checkAccepted(t *testing.T, m *manifests.Manifest) {
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("accepted manifest breaks a rule: "+format, args...)
	}
	if m.Schema != 1 {
		fail("schema %d", m.Schema)
	}
	if m.Name == "" || strings.ContainsFunc(m.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		fail("name %q", m.Name)
	}
	checkCheckpoint := func(table string, c manifests.Checkpoint, base model.Capability, allowed ...model.Capability) {
		t.Helper()
		if c.Path == "" || c.Dir == "" || strings.ContainsRune(c.Path, 0) {
			fail("[%s] path %q dir %q", table, c.Path, c.Dir)
		}
		if !c.Capabilities.Contains(base) {
			fail("[%s] capabilities [%s] lack %s", table, c.Capabilities, base)
		}
		seen := map[model.Capability]bool{}
		for _, cap := range c.Capabilities {
			if seen[cap] {
				fail("[%s] capability %s twice", table, cap)
			}
			seen[cap] = true
			ok := cap == base
			for _, a := range allowed {
				ok = ok || cap == a
			}
			if !ok {
				fail("[%s] capability %s", table, cap)
			}
		}
		if c.Architecture != "" && strings.ContainsAny(c.Architecture, " \t\n\x00") {
			fail("[%s] architecture %q", table, c.Architecture)
		}
	}
	checkCheckpoint("target", m.Target.Checkpoint, model.CapModel, model.CapDraftTarget)
	switch m.Target.DType {
	case manifests.DTypeAuto, manifests.DTypeFloat32, manifests.DTypeBFloat16, manifests.DTypeFloat16:
	default:
		fail("dtype %q", m.Target.DType)
	}
	if d := m.Draft; d != nil {
		checkCheckpoint("draft", d.Checkpoint, model.CapDraft, model.CapBlockDraft, model.CapSelector)
		if d.Capabilities.Contains(model.CapSelector) && !d.Capabilities.Contains(model.CapBlockDraft) {
			fail("selector without block-draft")
		}
		if (d.Plugin == "") != (d.SHA256 == "") {
			fail("plugin %q with sha256 %q", d.Plugin, d.SHA256)
		}
		if d.SHA256 != "" && !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(d.SHA256) {
			fail("sha256 %q", d.SHA256)
		}
	}
	s := m.Speculation
	if s.MaxDepth < 0 || s.MaxDepth > 64 || s.SelectorDepth < 1 || s.SelectorDepth > 64 {
		fail("speculation %+v", s)
	}
	if f := s.ConfidenceFloor; f != nil && !(*f >= 0 && *f < 1) {
		fail("confidence_floor = %v", *f)
	}
	sp := m.Sampling
	finite := func(name string, p *float64, ok func(float64) bool) {
		t.Helper()
		if p != nil && (math.IsNaN(*p) || math.IsInf(*p, 0) || !ok(*p)) {
			fail("%s = %v", name, *p)
		}
	}
	any := func(float64) bool { return true }
	finite("temperature", sp.Temperature, func(x float64) bool { return x >= 0 })
	finite("top_p", sp.TopP, func(x float64) bool { return x > 0 && x <= 1 })
	finite("min_p", sp.MinP, func(x float64) bool { return x >= 0 && x <= 1 })
	finite("repeat_penalty", sp.RepeatPenalty, func(x float64) bool { return x > 0 })
	finite("presence_penalty", sp.PresencePenalty, any)
	finite("frequency_penalty", sp.FrequencyPenalty, any)
	if sp.TopK != nil && *sp.TopK < 0 {
		fail("top_k %d", *sp.TopK)
	}
	if sp.RepeatLastN != nil && *sp.RepeatLastN < -1 {
		fail("repeat_last_n %d", *sp.RepeatLastN)
	}
	if sp.MaxTokens != nil && *sp.MaxTokens < 1 && *sp.MaxTokens != -1 {
		fail("max_tokens %d", *sp.MaxTokens)
	}
	for _, id := range sp.StopTokens {
		if id < 0 {
			fail("stop token %d", id)
		}
	}
	for _, s := range sp.StopStrings {
		if s == "" {
			fail("empty stop string")
		}
	}
}
