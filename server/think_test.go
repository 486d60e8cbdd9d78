package server

import (
	"strings"
	"testing"
)

// The split of a thinking model's output, by hand: the reasoning without
// the whitespace around it and without tags, the answer without its
// leading whitespace.
var thinkCases = []struct {
	name, out, thinking, answer string
}{
	{"template opened the block", "Let me see.\n2+2 is 4.\n</think>\n\nIt is 4.", "Let me see.\n2+2 is 4.", "It is 4."},
	{"model repeats the opening tag", "\n<think>\nHmm.\n</think>\n\nYes.", "Hmm.", "Yes."},
	{"no reasoning", "</think>\n\nDirect.", "", "Direct."},
	{"cut off while reasoning", "Still thinking about </th", "Still thinking about </th", ""},
	{"a tag-like word is reasoning", "<thinking> is a word\n</think>ok", "<thinking> is a word", "ok"},
	{"a later closing tag is answer", "a</think>b</think>c", "a", "b</think>c"},
	{"answer keeps its inner whitespace", "r</think>  x \n y ", "r", "x \n y "},
	{"empty output", "", "", ""},
}

func TestSplitThinking(t *testing.T) {
	for _, tc := range thinkCases {
		th, an := splitThinking(tc.out)
		if th != tc.thinking || an != tc.answer {
			t.Errorf("%s: split %q into %q | %q, want %q | %q", tc.name, tc.out, th, an, tc.thinking, tc.answer)
		}
	}
}

// Streamed in pieces cut at every byte (tags included), the concatenated
// pieces equal the whole output's split.
func TestThinkSplitterStreams(t *testing.T) {
	for _, tc := range thinkCases {
		for cut := 0; cut <= len(tc.out); cut++ {
			for _, pieces := range [][]string{{tc.out[:cut], tc.out[cut:]}, strings.Split(tc.out, "")} {
				var s thinkSplitter
				var th, an strings.Builder
				for _, p := range pieces {
					a, b := s.feed(p)
					th.WriteString(a)
					an.WriteString(b)
				}
				a, b := s.flush()
				th.WriteString(a)
				an.WriteString(b)
				if th.String() != tc.thinking || an.String() != tc.answer {
					t.Errorf("%s in pieces %q: %q | %q, want %q | %q", tc.name, pieces, th.String(), an.String(), tc.thinking, tc.answer)
				}
			}
		}
	}
}

// think: true returns the reasoning apart, as ollama does: message.thinking
// in /api/chat, thinking in /api/generate, streamed or not; think: false
// and no think leave the output whole in content.
func TestOllamaThinkSplitsReasoning(t *testing.T) {
	gen := &fakeGen{tokens: []string{"Two and", " two.\n</th", "ink>\n\n", "Four", "."}}
	_, ts, _ := newFakeServer(t, gen, Config{})

	body := readAll(t, post(t, ts.URL+"/api/chat", `{"model":"tiny","stream":false,"think":true,"messages":[{"role":"user","content":"2+2?"}]}`))
	msg := decode[map[string]any](t, body)["message"].(map[string]any)
	if msg["thinking"] != "Two and two." || msg["content"] != "Four." {
		t.Fatalf("chat with think: %s", body)
	}
	if req := gen.lastRequest(t); req.ChatArgs["enable_thinking"] != true {
		t.Fatalf("engine request %+v", req)
	}

	lines := strings.Split(strings.TrimSpace(readAll(t, post(t, ts.URL+"/api/chat", `{"model":"tiny","think":true,"messages":[{"role":"user","content":"2+2?"}]}`))), "\n")
	var thinking, content strings.Builder
	for _, l := range lines[:len(lines)-1] {
		m := decode[map[string]any](t, l)["message"].(map[string]any)
		th, _ := m["thinking"].(string)
		if th == "" && m["content"] == "" {
			t.Errorf("empty chunk %s", l)
		}
		thinking.WriteString(th)
		content.WriteString(m["content"].(string))
	}
	if thinking.String() != "Two and two." || content.String() != "Four." {
		t.Fatalf("streamed chat with think: %q | %q from %q", thinking.String(), content.String(), lines)
	}

	body = readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"2+2?","stream":false,"think":true}`))
	if final := decode[map[string]any](t, body); final["thinking"] != "Two and two." || final["response"] != "Four." {
		t.Fatalf("generate with think: %s", body)
	}

	whole := "Two and two.\n</think>\n\nFour."
	for _, think := range []string{`"think":false,`, ""} {
		body = readAll(t, post(t, ts.URL+"/api/chat", `{"model":"tiny","stream":false,`+think+`"messages":[{"role":"user","content":"2+2?"}]}`))
		msg = decode[map[string]any](t, body)["message"].(map[string]any)
		if _, has := msg["thinking"]; has || msg["content"] != whole {
			t.Fatalf("chat with %q: %s", think, body)
		}
	}
	// raw: the prompt is the caller's, so is the output.
	body = readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"x","raw":true,"stream":false,"think":true}`))
	if final := decode[map[string]any](t, body); final["response"] != whole || final["thinking"] != nil {
		t.Fatalf("raw generate with think: %s", body)
	}
}

// chat_template_kwargs {"enable_thinking": true} (vLLM's extension) returns
// the reasoning apart in OpenAI's API, under vLLM's name (reasoning) and
// DeepSeek's (reasoning_content): in the message, or in the deltas, where a
// reasoning delta carries no content. Without it the output is whole.
func TestOpenAIThinkingSplitsReasoning(t *testing.T) {
	gen := &fakeGen{tokens: []string{"Two and", " two.\n</th", "ink>\n\n", "Four", "."}}
	_, ts, _ := newFakeServer(t, gen, Config{})
	const ask = `"messages":[{"role":"user","content":"2+2?"}]`

	body := readAll(t, post(t, ts.URL+"/v1/chat/completions", `{"model":"tiny","chat_template_kwargs":{"enable_thinking":true},`+ask+`}`))
	msg := decode[map[string]any](t, body)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["content"] != "Four." || msg["reasoning"] != "Two and two." || msg["reasoning_content"] != "Two and two." {
		t.Fatalf("chat with enable_thinking: %s", body)
	}
	if req := gen.lastRequest(t); req.ChatArgs["enable_thinking"] != true {
		t.Fatalf("engine request %+v", req)
	}

	ev := sseEvents(t, post(t, ts.URL+"/v1/chat/completions", `{"model":"tiny","stream":true,"chat_template_kwargs":{"enable_thinking":true},`+ask+`}`))
	var reasoning, content strings.Builder
	for _, e := range ev[1 : len(ev)-2] { // after the role chunk, before the finish chunk and [DONE]
		d := decode[map[string]any](t, e)["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
		r, _ := d["reasoning"].(string)
		c, hasContent := d["content"].(string)
		if r != "" && hasContent && c == "" || d["reasoning_content"] != d["reasoning"] {
			t.Errorf("delta %s", e)
		}
		reasoning.WriteString(r)
		content.WriteString(c)
	}
	if reasoning.String() != "Two and two." || content.String() != "Four." {
		t.Fatalf("streamed: %q | %q from %q", reasoning.String(), content.String(), ev)
	}

	body = readAll(t, post(t, ts.URL+"/v1/chat/completions", `{"model":"tiny","chat_template_kwargs":{"enable_thinking":false},`+ask+`}`))
	msg = decode[map[string]any](t, body)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if _, has := msg["reasoning"]; has || msg["content"] != "Two and two.\n</think>\n\nFour." {
		t.Fatalf("chat without thinking: %s", body)
	}
	if req := gen.lastRequest(t); req.ChatArgs["enable_thinking"] != false {
		t.Fatalf("engine request %+v", req)
	}

	for _, bad := range []string{`"chat_template_kwargs":[1],`, `"chat_template_kwargs":{"enable_thinking":"yes"},`} {
		r := post(t, ts.URL+"/v1/chat/completions", `{"model":"tiny",`+bad+ask+`}`)
		if body := readAll(t, r); r.StatusCode != 400 || !strings.Contains(body, "chat_template_kwargs") {
			t.Errorf("%s: %d %s", bad, r.StatusCode, body)
		}
	}
}
