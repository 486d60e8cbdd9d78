package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/internal/fixtures"
	"github.com/specula-dev/specula/speculation"
)

// fakeGen is a scripted model: it emits tokens in order, optionally waiting
// for a release before each one, and records what it was asked.
type fakeGen struct {
	tokens  []string
	release chan struct{} // nil: no waiting
	started chan struct{} // receives once per Generate call, if not nil
	// refuse, when set, is returned before any token (as the engine refuses
	// a prompt longer than the context).
	refuse error

	mu        sync.Mutex
	requests  []engine.Request
	cancelled int
	freed     atomic.Int32
}

func (f *fakeGen) Generate(ctx context.Context, req engine.Request, onToken func(engine.Token) error) (*engine.Response, error) {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	if f.started != nil {
		f.started <- struct{}{}
	}
	if f.refuse != nil {
		return nil, f.refuse
	}
	resp := &engine.Response{PromptIDs: []int32{1, 2, 3, 4, 5}, PromptTokens: 5, CachedTokens: 2,
		PrefillTime: time.Millisecond, FirstTokenTime: 2 * time.Millisecond,
		Stats: speculation.Stats{DraftRounds: 2, Drafted: 6, Accepted: 4,
			PositionDrafted: []int{2, 2, 2}, PositionAccepted: []int{2, 1, 1}, DepthPolicy: "fixed 3"}}
	n := len(f.tokens)
	if req.MaxTokens > 0 {
		n = min(n, req.MaxTokens)
	}
	for i, t := range f.tokens[:n] {
		if f.release != nil {
			select {
			case <-f.release:
			case <-ctx.Done():
				f.mu.Lock()
				f.cancelled++
				f.mu.Unlock()
				return resp, ctx.Err()
			}
		}
		if err := onToken(engine.Token{ID: int32(100 + i), Text: t}); err != nil {
			f.mu.Lock()
			f.cancelled++
			f.mu.Unlock()
			return resp, err
		}
		resp.IDs = append(resp.IDs, int32(100+i))
		resp.Text += t
	}
	resp.DoneReason = "length"
	resp.Total = 5 * time.Millisecond
	return resp, nil
}

func (f *fakeGen) Free(context.Context) error {
	f.freed.Add(1)
	return nil
}

func (f *fakeGen) lastRequest(t *testing.T) engine.Request {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		t.Fatal("the model got no request")
	}
	return f.requests[len(f.requests)-1]
}

// testManifest writes a manifest named name over the fixture target (the
// server reads manifests at start; the fake never loads weights).
func testManifest(t *testing.T, name string) string {
	t.Helper()
	text := fmt.Sprintf("schema = 1\nname = %q\n[target]\npath = %q\ncapabilities = [\"model\", \"draft-target\"]\ndtype = \"float32\"\n",
		name, fixtures.Dir(t, "qwen35-tiny"))
	path := filepath.Join(t.TempDir(), name+".toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// newFakeServer serves one model "tiny" backed by gen.
func newFakeServer(t *testing.T, gen *fakeGen, cfg Config) (*Server, *httptest.Server, *atomic.Int32) {
	t.Helper()
	loads := &atomic.Int32{}
	cfg.Manifests = []string{testManifest(t, "tiny")}
	cfg.Load = func(ctx context.Context, manifest string) (Generator, error) {
		loads.Add(1)
		return gen, nil
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return srv, ts, loads
}

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, r *http.Response) string {
	t.Helper()
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v in %q", err, s)
	}
	return v
}

// ollama's /api/generate streams one NDJSON object per token, then a final
// object with the done reason, nanosecond timings, the context and the
// speculation statistics; options reach the engine request.
func TestOllamaGenerateStreams(t *testing.T) {
	gen := &fakeGen{tokens: []string{"Hel", "lo", "", " world"}}
	_, ts, _ := newFakeServer(t, gen, Config{})
	resp := post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"hi","system":"be brief","options":{"num_predict":4,"temperature":0.5,"top_k":3,"seed":-7,"stop":["x"],"repeat_penalty":1.1,"num_ctx":4096}}`)
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	lines := strings.Split(strings.TrimSpace(readAll(t, resp)), "\n")
	if len(lines) != 4 { // three non-empty pieces, then the final object
		t.Fatalf("%d lines: %q", len(lines), lines)
	}
	var text strings.Builder
	for _, l := range lines[:3] {
		c := decode[map[string]any](t, l)
		if c["done"] != false || c["model"] != "tiny" {
			t.Fatalf("chunk %s", l)
		}
		text.WriteString(c["response"].(string))
	}
	if text.String() != "Hello world" {
		t.Fatalf("streamed %q", text.String())
	}
	final := decode[map[string]any](t, lines[3])
	if final["done"] != true || final["done_reason"] != "length" || final["eval_count"] != 4.0 || final["prompt_eval_count"] != 3.0 {
		t.Fatalf("final %s", lines[3])
	}
	for _, k := range []string{"total_duration", "prompt_eval_duration", "eval_duration"} {
		if v, ok := final[k].(float64); !ok || v <= 0 {
			t.Fatalf("final %s = %v", k, final[k])
		}
	}
	if ctx, ok := final["context"].([]any); !ok || len(ctx) != 9 {
		t.Fatalf("context %v, want the 5 prompt and 4 answer ids", final["context"])
	}
	spec := final["speculation"].(map[string]any)
	if spec["drafted"] != 6.0 || spec["accepted"] != 4.0 || spec["mean_acceptance_length"] != 3.0 || spec["cached_tokens"] != 2.0 {
		t.Fatalf("speculation %v", spec)
	}
	req := gen.lastRequest(t)
	if len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[1].Content != "hi" {
		t.Fatalf("messages %+v", req.Messages)
	}
	if req.MaxTokens != 4 || *req.Temperature != 0.5 || *req.TopK != 3 || *req.Seed != uint64(1<<64-7) || req.StopStrings[0] != "x" || *req.RepeatPenalty != float32(1.1) {
		t.Fatalf("engine request %+v", req)
	}
}

// stream: false gives one object; /api/chat answers with a message; raw
// sends the prompt as is.
func TestOllamaChatAndRaw(t *testing.T) {
	gen := &fakeGen{tokens: []string{"a", "b"}}
	_, ts, _ := newFakeServer(t, gen, Config{})
	body := readAll(t, post(t, ts.URL+"/api/chat", `{"model":"tiny:latest","stream":false,"think":false,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"r"},{"role":"user","content":"s"}]}`))
	final := decode[map[string]any](t, body)
	msg := final["message"].(map[string]any)
	if msg["role"] != "assistant" || msg["content"] != "ab" || final["done_reason"] != "length" || final["context"] != nil {
		t.Fatalf("chat answer %s", body)
	}
	req := gen.lastRequest(t)
	if len(req.Messages) != 3 || req.ChatArgs["enable_thinking"] != false {
		t.Fatalf("engine request %+v", req)
	}
	body = readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"<raw>","raw":true,"stream":false}`))
	if final := decode[map[string]any](t, body); final["response"] != "ab" || final["context"] != nil {
		t.Fatalf("raw answer %s", body)
	}
	if req := gen.lastRequest(t); req.Prompt != "<raw>" || req.Messages != nil {
		t.Fatalf("raw request %+v", req)
	}
}

// sseEvents reads an SSE body into its data payloads.
func sseEvents(t *testing.T, r *http.Response) []string {
	t.Helper()
	defer r.Body.Close()
	if ct := r.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var out []string
	sc := bufio.NewScanner(r.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		} else if sc.Text() != "" {
			t.Fatalf("unexpected SSE line %q", sc.Text())
		}
	}
	return out
}

// OpenAI's chat stream: a role chunk, content chunks, a finish chunk with
// the speculation statistics, a usage chunk (choices empty) when asked,
// then [DONE].
func TestOpenAIChatStream(t *testing.T) {
	gen := &fakeGen{tokens: []string{"x", "y"}}
	_, ts, _ := newFakeServer(t, gen, Config{})
	ev := sseEvents(t, post(t, ts.URL+"/v1/chat/completions", `{"model":"tiny","stream":true,"stream_options":{"include_usage":true},"max_tokens":2,"temperature":0,"messages":[{"role":"developer","content":"sys"},{"role":"user","content":[{"type":"text","text":"he"},{"type":"text","text":"llo"}]}]}`))
	if len(ev) != 6 || ev[5] != "[DONE]" {
		t.Fatalf("events %q", ev)
	}
	type chunk struct {
		Object  string `json:"object"`
		Choices []struct {
			Delta        map[string]any `json:"delta"`
			FinishReason *string        `json:"finish_reason"`
		} `json:"choices"`
		Usage       *openAIUsage `json:"usage"`
		Speculation *specStats   `json:"speculation"`
	}
	first := decode[chunk](t, ev[0])
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta["role"] != "assistant" {
		t.Fatalf("first chunk %s", ev[0])
	}
	if decode[chunk](t, ev[1]).Choices[0].Delta["content"] != "x" || decode[chunk](t, ev[2]).Choices[0].Delta["content"] != "y" {
		t.Fatalf("content chunks %q", ev[1:3])
	}
	finish := decode[chunk](t, ev[3])
	if r := finish.Choices[0].FinishReason; r == nil || *r != "length" || finish.Speculation == nil || finish.Speculation.Drafted != 6 {
		t.Fatalf("finish chunk %s", ev[3])
	}
	u := decode[chunk](t, ev[4])
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.PromptTokens != 5 || u.Usage.CompletionTokens != 2 || u.Usage.TotalTokens != 7 || u.Usage.PromptTokensDetails.CachedTokens != 2 {
		t.Fatalf("usage chunk %s", ev[4])
	}
	req := gen.lastRequest(t)
	if req.Messages[0].Role != "system" || req.Messages[1].Content != "hello" || req.MaxTokens != 2 || *req.Temperature != 0 {
		t.Fatalf("engine request %+v", req)
	}
}

// A request the engine refuses before its first token (a prompt longer
// than the context) is an HTTP error in each API's shape, streamed or not:
// nothing of a stream was sent yet, so OpenAI clients raise their
// BadRequestError as for any other bad request, not an error event after a
// 200.
func TestRefusedBeforeFirstToken(t *testing.T) {
	const why = "the prompt is 5000 tokens, but the model's context holds 4096"
	gen := &fakeGen{refuse: &engine.PromptError{Err: errors.New(why)}}
	_, ts, _ := newFakeServer(t, gen, Config{})
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"x"}]}`},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`},
		{"/v1/completions", `{"model":"tiny","stream":true,"prompt":"x"}`},
		{"/api/chat", `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`},
		{"/api/generate", `{"model":"tiny","prompt":"x"}`},
	} {
		resp := post(t, ts.URL+c.path, c.body)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s %s: status %d (%s), want 400 with a JSON error: %s", c.path, c.body, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		var msg string
		if strings.HasPrefix(c.path, "/v1/") {
			e := decode[openAIError](t, body)
			msg = e.Error.Message
			if e.Error.Type != "invalid_request_error" {
				t.Fatalf("%s: error type %q, want invalid_request_error", c.path, e.Error.Type)
			}
		} else {
			msg = decode[map[string]string](t, body)["error"]
		}
		if msg != why {
			t.Fatalf("%s: error %s, want %q", c.path, body, why)
		}
	}
}

// Non-streaming completions: one object with the text, finish reason, usage
// and statistics; a prompt of token ids reaches the engine as ids.
func TestOpenAICompletion(t *testing.T) {
	gen := &fakeGen{tokens: []string{"1", "2", "3"}}
	_, ts, _ := newFakeServer(t, gen, Config{})
	body := readAll(t, post(t, ts.URL+"/v1/completions", `{"model":"tiny","prompt":[5,6,7],"stop":"zz"}`))
	var out struct {
		Object  string `json:"object"`
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage       openAIUsage `json:"usage"`
		Speculation specStats   `json:"speculation"`
	}
	out = decode[struct {
		Object  string `json:"object"`
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage       openAIUsage `json:"usage"`
		Speculation specStats   `json:"speculation"`
	}](t, body)
	if out.Object != "text_completion" || out.Choices[0].Text != "123" || out.Choices[0].FinishReason != "length" || out.Usage.CompletionTokens != 3 || len(out.Speculation.AcceptanceByPosition) != 3 {
		t.Fatalf("completion %s", body)
	}
	if req := gen.lastRequest(t); len(req.IDs) != 3 || req.IDs[2] != 7 || req.StopStrings[0] != "zz" {
		t.Fatalf("engine request %+v", req)
	}
	models := decode[struct {
		Object string        `json:"object"`
		Data   []openAIModel `json:"data"`
	}](t, readAll(t, mustGet(t, ts.URL+"/v1/models")))
	if models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != "tiny" || models.Data[0].Object != "model" {
		t.Fatalf("models %+v", models)
	}
}

func mustGet(t *testing.T, url string) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Bad input is answered with a clear error in each API's shape, naming the
// field, and the server keeps serving.
func TestBadInput(t *testing.T) {
	gen := &fakeGen{tokens: []string{"ok"}}
	_, ts, _ := newFakeServer(t, gen, Config{MaxBodyBytes: 4096})
	big := `{"model":"tiny","prompt":"` + strings.Repeat("a", 5000) + `"}`
	cases := []struct {
		name, path, body string
		status           int
		want             string // in the message
		param            string // OpenAI's param
	}{
		{"malformed JSON", "/api/generate", `{"model": "tiny", "prompt": }`, 400, "malformed JSON", ""},
		{"truncated JSON", "/api/chat", `{"model": "tiny"`, 400, "ends early", ""},
		{"not an object", "/api/generate", `[1,2]`, 400, "must be a JSON object", ""},
		{"empty body", "/api/generate", ``, 400, "empty", ""},
		{"wrong type", "/api/generate", `{"model":"tiny","prompt":5}`, 400, `field "prompt": got number, want a string`, ""},
		{"wrong option type", "/api/generate", `{"model":"tiny","prompt":"x","options":{"top_k":"many"}}`, 400, `"options.top_k"`, ""},
		{"unknown model", "/api/generate", `{"model":"nope","prompt":"x"}`, 404, `model "nope" not found; served models: tiny`, ""},
		{"missing model", "/api/chat", `{"messages":[{"role":"user","content":"x"}]}`, 400, "model is required", ""},
		{"negative num_predict", "/api/generate", `{"model":"tiny","prompt":"x","options":{"num_predict":-5}}`, 400, "options.num_predict = -5 is out of range", ""},
		{"zero num_predict", "/api/generate", `{"model":"tiny","prompt":"x","options":{"num_predict":0}}`, 400, "options.num_predict = 0", ""},
		{"top_p out of range", "/api/generate", `{"model":"tiny","prompt":"x","options":{"top_p":2}}`, 400, "options.top_p = 2 is out of range: want 0 < options.top_p <= 1", ""},
		{"empty stop", "/api/generate", `{"model":"tiny","prompt":"x","options":{"stop":[""]}}`, 400, "options.stop", ""},
		{"bad role", "/api/chat", `{"model":"tiny","messages":[{"role":"robot","content":"x"}]}`, 400, `messages[0].role "robot" is not a chat role`, ""},
		{"format", "/api/chat", `{"model":"tiny","format":"json","messages":[{"role":"user","content":"x"}]}`, 400, "format", ""},
		{"bad keep_alive", "/api/generate", `{"model":"tiny","prompt":"x","keep_alive":"soon"}`, 400, "keep_alive", ""},
		{"oversized body", "/api/generate", big, 413, "larger than 4096 bytes", ""},
		{"openai malformed", "/v1/chat/completions", `{"model":`, 400, "malformed JSON", ""},
		{"openai unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "not found", "model"},
		{"openai empty messages", "/v1/chat/completions", `{"model":"tiny","messages":[]}`, 400, "messages is empty", "messages"},
		{"openai negative max_tokens", "/v1/chat/completions", `{"model":"tiny","max_tokens":-3,"messages":[{"role":"user","content":"x"}]}`, 400, "max_tokens = -3", "max_tokens"},
		{"openai temperature", "/v1/completions", `{"model":"tiny","prompt":"x","temperature":-0.5}`, 400, "temperature = -0.5 is out of range", "temperature"},
		{"openai n", "/v1/completions", `{"model":"tiny","prompt":"x","n":2}`, 400, "n = 2", "n"},
		{"openai tools", "/v1/chat/completions", `{"model":"tiny","tools":[{"type":"function"}],"messages":[{"role":"user","content":"x"}]}`, 400, "tools", "tools"},
		{"openai image part", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "image_url", "messages[0].content[0].type"},
		{"openai oversized", "/v1/completions", big, 413, "larger than", ""},
		// Fields shared by chats and completions are named as the client
		// spelled them, not by the Go struct that holds them.
		{"openai wrong type", "/v1/chat/completions", `{"model":"tiny","temperature":"hot","messages":[{"role":"user","content":"x"}]}`, 400, `field "temperature": got string, want a number`, "temperature"},
		{"openai wrong nested type", "/v1/chat/completions", `{"model":"tiny","stream":true,"stream_options":{"include_usage":"yes"},"messages":[{"role":"user","content":"x"}]}`, 400, `field "stream_options.include_usage": got string, want true or false`, "stream_options.include_usage"},
		{"openai completion wrong type", "/v1/completions", `{"model":"tiny","prompt":"x","seed":1.5}`, 400, `field "seed": got number 1.5, want an integer`, "seed"},
		{"no route", "/api/pull", `{}`, 404, "no route", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := post(t, ts.URL+c.path, c.body)
			body := readAll(t, resp)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			if strings.HasPrefix(c.path, "/v1/") {
				e := decode[openAIError](t, body)
				if !strings.Contains(e.Error.Message, c.want) || e.Error.Type == "" {
					t.Fatalf("error %s, want a message with %q", body, c.want)
				}
				if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
					t.Fatalf("error %s, want param %q", body, c.param)
				}
				return
			}
			e := decode[map[string]string](t, body)
			if !strings.Contains(e["error"], c.want) {
				t.Fatalf("error %s, want a message with %q", body, c.want)
			}
		})
	}
	// Still serving.
	if final := decode[map[string]any](t, readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"x","stream":false}`))); final["response"] != "ok" {
		t.Fatalf("after bad input: %v", final)
	}
}

// OpenAI's error code says what went wrong for clients that switch on it:
// model_not_found only when the model is unknown, not for a path that
// does not exist.
func TestOpenAIErrorCodes(t *testing.T) {
	_, ts, _ := newFakeServer(t, &fakeGen{tokens: []string{"ok"}}, Config{})
	for _, c := range []struct {
		path, body string
		status     int
		code       string // "" : null
	}{
		{"/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "model_not_found"},
		{"/v1/models/nope", "", 404, "model_not_found"},
		{"/v1/embeddings", `{"model":"tiny","input":"x"}`, 404, ""},
		{"/v1/chat/completion", `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`, 404, ""},
	} {
		var resp *http.Response
		if c.body == "" {
			resp = mustGet(t, ts.URL+c.path)
		} else {
			resp = post(t, ts.URL+c.path, c.body)
		}
		body := readAll(t, resp)
		e := decode[openAIError](t, body)
		got := ""
		if e.Error.Code != nil {
			got = *e.Error.Code
		}
		if resp.StatusCode != c.status || got != c.code {
			t.Fatalf("%s: status %d, code %q, want %d and %q: %s", c.path, resp.StatusCode, got, c.status, c.code, body)
		}
	}
}

// waitFor polls cond until it holds (a few seconds at most).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client that stops reading a stream without closing it (its buffers
// full) does not hold the model, or the models queued behind it: once a
// write has waited StallTimeout, its generation is cancelled and the next
// request is served.
func TestStalledClientReleasesTheModel(t *testing.T) {
	// Large tokens fill the connection's buffers, then the job's token buffer.
	gen := &fakeGen{tokens: slices.Repeat([]string{strings.Repeat("x", 1<<15)}, 2000), started: make(chan struct{}, 8)}
	_, ts, _ := newFakeServer(t, gen, Config{StallTimeout: 200 * time.Millisecond})
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"tiny","prompt":"x"}`
	fmt.Fprintf(conn, "POST /api/generate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	<-gen.started // the stalled stream runs; its client reads nothing
	done := make(chan string, 1)
	go func() {
		client := &http.Client{Timeout: 20 * time.Second}
		resp, err := client.Post(ts.URL+"/api/generate", "application/json", strings.NewReader(`{"model":"tiny","prompt":"y","stream":false,"options":{"num_predict":1}}`))
		if err != nil {
			done <- err.Error()
			return
		}
		done <- readAll(t, resp)
	}()
	select {
	case got := <-done:
		if final := decode[map[string]any](t, got); final["response"] != gen.tokens[0] {
			t.Fatalf("the request after a stalled stream: %.200s", got)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a client that reads nothing held the model: the next request was not served")
	}
	gen.mu.Lock()
	if gen.cancelled != 1 {
		t.Fatalf("%d generations cancelled, want the stalled one", gen.cancelled)
	}
	gen.mu.Unlock()

	// The bound is on each write of a stream, not on the connection: a
	// kept-alive connection's next request, later than StallTimeout, is
	// answered.
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
	for i, path := range []string{"/api/generate", "/v1/completions", "/api/generate"} {
		if i > 0 {
			time.Sleep(400 * time.Millisecond)
		}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST", ts.URL+path,
			strings.NewReader(`{"model":"tiny","prompt":"z","stream":true,"max_tokens":2,"options":{"num_predict":2}}`))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d on a kept-alive connection: %v", i, err)
		}
		if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, `"done":true`) && !strings.Contains(body, "[DONE]") {
			t.Fatalf("request %d on a kept-alive connection: %d %.300s", i, resp.StatusCode, body)
		}
	}
	if !slices.Equal(reused, []bool{false, true, true}) {
		t.Fatalf("connections reused %v, want one connection for the three requests", reused)
	}
}

// A full queue is answered 503 with Retry-After; the queued request is then
// served in order.
func TestQueueFull(t *testing.T) {
	gen := &fakeGen{tokens: []string{"a"}, release: make(chan struct{}), started: make(chan struct{}, 4)}
	srv, ts, _ := newFakeServer(t, gen, Config{MaxQueue: 1})
	results := make(chan string, 2)
	go func() {
		results <- readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"1","stream":false}`))
	}()
	<-gen.started // the first request runs
	go func() {
		results <- readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"2","stream":false}`))
	}()
	waitFor(t, "the second request to queue", func() bool { return srv.metrics.queueDepth.get() == 1 })
	for _, path := range []string{"/api/generate", "/v1/completions"} {
		resp := post(t, ts.URL+path, `{"model":"tiny","prompt":"3"}`)
		body := readAll(t, resp)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "server busy") {
			t.Fatalf("%s with a full queue: %d %q (Retry-After %q)", path, resp.StatusCode, body, resp.Header.Get("Retry-After"))
		}
	}
	gen.release <- struct{}{}
	<-gen.started
	gen.release <- struct{}{}
	for range 2 {
		if final := decode[map[string]any](t, <-results); final["response"] != "a" {
			t.Fatalf("queued answer %v", final)
		}
	}
	if got := srv.metrics.model("tiny").requests["busy"]; got != 2 {
		t.Fatalf("busy count %d", got)
	}
}

// A client that goes away mid-stream cancels its generation at once (the
// model sees its context end while waiting for the next token); nothing is
// left running and the next request is served.
func TestClientDisconnectCancels(t *testing.T) {
	gen := &fakeGen{tokens: strings.Split(strings.Repeat("t", 50), ""), release: make(chan struct{}, 100), started: make(chan struct{}, 2)}
	srv, ts, _ := newFakeServer(t, gen, Config{})
	baseline := runtime.NumGoroutine()
	for _, path := range []string{"/api/generate", "/v1/completions"} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+path, strings.NewReader(`{"model":"tiny","prompt":"x","stream":true}`))
		gen.release <- struct{}{} // one token: the headers go out with it
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		<-gen.started
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.Contains(line, `"t"`) {
			t.Fatalf("first line %q, %v", line, err)
		}
		cancel()
		resp.Body.Close()
		waitFor(t, "the generation to stop", func() bool {
			gen.mu.Lock()
			defer gen.mu.Unlock()
			return gen.cancelled == 1
		})
		gen.mu.Lock()
		gen.cancelled = 0
		gen.mu.Unlock()
		waitFor(t, "the request to be counted cancelled", func() bool {
			srv.metrics.mu.Lock()
			defer srv.metrics.mu.Unlock()
			return srv.metrics.model("tiny").requests["cancelled"] >= 1
		})
	}
	for range 50 {
		gen.release <- struct{}{}
	}
	go func() { <-gen.started }()
	if final := decode[map[string]any](t, readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"x","stream":false,"options":{"num_predict":3}}`))); final["response"] != "ttt" {
		t.Fatalf("after the disconnects: %v", final)
	}
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= baseline })
}

// keep_alive: 0 unloads after the request, an empty prompt loads or (with
// keep_alive 0) unloads, /api/ps shows what is loaded and until when.
func TestKeepAlive(t *testing.T) {
	gen := &fakeGen{tokens: []string{"a"}}
	srv, ts, loads := newFakeServer(t, gen, Config{KeepAlive: time.Hour})
	ps := func() []ollamaModelEntry {
		return decode[struct {
			Models []ollamaModelEntry `json:"models"`
		}](t, readAll(t, mustGet(t, ts.URL+"/api/ps"))).Models
	}
	if len(ps()) != 0 {
		t.Fatal("a model is loaded before any request")
	}
	final := decode[map[string]any](t, readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny"}`)))
	if final["done_reason"] != "load" || loads.Load() != 1 {
		t.Fatalf("empty prompt: %v (loads %d)", final, loads.Load())
	}
	if m := ps(); len(m) != 1 || m[0].Name != "tiny" || m[0].ExpiresAt == "" {
		t.Fatalf("ps after loading: %+v", m)
	}
	readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"x","keep_alive":0}`))
	waitFor(t, "the unload", func() bool { return gen.freed.Load() == 1 && len(ps()) == 0 })
	if srv.metrics.loaded.get() != 0 {
		t.Fatalf("loaded gauge %d", srv.metrics.loaded.get())
	}
	// A negative keep_alive keeps the model without an expiry; an empty
	// chat with keep_alive 0 unloads it.
	readAll(t, post(t, ts.URL+"/api/chat", `{"model":"tiny","keep_alive":-1,"messages":[{"role":"user","content":"x"}]}`))
	waitFor(t, "the load", func() bool { m := ps(); return len(m) == 1 && m[0].ExpiresAt == "" })
	final = decode[map[string]any](t, readAll(t, post(t, ts.URL+"/api/chat", `{"model":"tiny","keep_alive":"0s","messages":[]}`)))
	if final["done_reason"] != "unload" || gen.freed.Load() != 2 || len(ps()) != 0 {
		t.Fatalf("unload: %v, freed %d", final, gen.freed.Load())
	}
	// A short keep-alive expires by itself.
	readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"x","keep_alive":"10ms"}`))
	waitFor(t, "the keep-alive to expire", func() bool { return gen.freed.Load() == 3 })
}

// /metrics reports vLLM's speculative-decoding counters under our prefix,
// the latency histograms, the queue and the loaded models.
func TestMetrics(t *testing.T) {
	gen := &fakeGen{tokens: []string{"a", "b"}}
	_, ts, _ := newFakeServer(t, gen, Config{KeepAlive: time.Hour})
	for range 2 {
		readAll(t, post(t, ts.URL+"/api/generate", `{"model":"tiny","prompt":"x","stream":false}`))
	}
	resp := mustGet(t, ts.URL+"/metrics")
	body := readAll(t, resp)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`specula:spec_decode_num_drafts_total{model_name="tiny"} 4`,
		`specula:spec_decode_num_draft_tokens_total{model_name="tiny"} 12`,
		`specula:spec_decode_num_accepted_tokens_total{model_name="tiny"} 8`,
		`specula:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="0"} 4`,
		`specula:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="2"} 2`,
		`specula:generation_tokens_total{model_name="tiny"} 4`,
		`specula:requests_total{model_name="tiny",outcome="ok"} 2`,
		`specula:e2e_request_latency_seconds_count{model_name="tiny"} 2`,
		`specula:time_to_first_token_seconds_bucket{model_name="tiny",le="+Inf"} 2`,
		"# TYPE specula:spec_decode_num_drafts_total counter",
		"# TYPE specula:time_to_first_token_seconds histogram",
		"specula:num_requests_waiting 0",
		"specula:models_loaded 1",
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// With an API key every route but /health needs the bearer token.
func TestAPIKey(t *testing.T) {
	gen := &fakeGen{tokens: []string{"a"}}
	_, ts, _ := newFakeServer(t, gen, Config{APIKey: "s3cret"})
	if r := mustGet(t, ts.URL+"/health"); r.StatusCode != 200 {
		t.Fatalf("/health: %d", r.StatusCode)
	}
	for _, auth := range []string{"", "Bearer wrong", "s3cret"} {
		req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); resp.StatusCode != 401 || !strings.Contains(body, "invalid_api_key") {
			t.Fatalf("auth %q: %d %s", auth, resp.StatusCode, body)
		}
	}
	req, _ := http.NewRequest("GET", ts.URL+"/api/tags", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("right key: %v %v", resp, err)
	}
}

// Two manifests with one name are refused at start.
func TestDuplicateNames(t *testing.T) {
	_, err := New(Config{Manifests: []string{testManifest(t, "same"), testManifest(t, "same")}})
	if err == nil || !strings.Contains(err.Error(), `both name the model "same"`) {
		t.Fatalf("New = %v", err)
	}
}
