package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/tokenizer"
)

// OpenAI's API: /v1/chat/completions, /v1/completions, /v1/models, decoded
// into the internal request and encoded from the engine's answer, streamed
// as server-sent events.

type openAIStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// openAICommon are the fields chat and completion requests share.
type openAICommon struct {
	Model               string               `json:"model"`
	Stream              bool                 `json:"stream"`
	StreamOptions       *openAIStreamOptions `json:"stream_options"`
	MaxTokens           *int                 `json:"max_tokens"`
	MaxCompletionTokens *int                 `json:"max_completion_tokens"`
	Temperature         *float64             `json:"temperature"`
	TopP                *float64             `json:"top_p"`
	PresencePenalty     *float64             `json:"presence_penalty"`
	FrequencyPenalty    *float64             `json:"frequency_penalty"`
	Seed                *int64               `json:"seed"`
	Stop                json.RawMessage      `json:"stop"`
	N                   *int                 `json:"n"`
	User                string               `json:"user"`
	// Extensions vLLM and ollama accept too.
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
}

type openAIMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name,omitempty"`
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
	// The reasoning of a thinking model, when the request turned thinking
	// on: under vLLM's name and under DeepSeek's, which clients read.
	Reasoning        string `json:"reasoning,omitempty"`
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

type openAIChatRequest struct {
	openAICommon
	Messages       []openAIMessage `json:"messages"`
	ResponseFormat json.RawMessage `json:"response_format"`
	Logprobs       *bool           `json:"logprobs"`
	TopLogprobs    *int            `json:"top_logprobs"`
	Tools          json.RawMessage `json:"tools"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	// ChatTemplateKwargs are variables for the chat template (vLLM's and
	// SGLang's extension): {"enable_thinking": true} turns a Qwen3.5
	// model's reasoning on.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

type openAICompletionRequest struct {
	openAICommon
	Prompt   json.RawMessage `json:"prompt"`
	Suffix   *string         `json:"suffix"`
	Echo     bool            `json:"echo"`
	BestOf   *int            `json:"best_of"`
	Logprobs *int            `json:"logprobs"`
}

// openAINames spells the sampling settings as OpenAI's fields do.
var openAINames = fieldNames{
	"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
	"seed": "seed", "repeat_penalty": "repetition_penalty", "presence_penalty": "presence_penalty",
	"frequency_penalty": "frequency_penalty", "max_tokens": "max_tokens", "stop": "stop",
}

// apply decodes the shared fields into req. Fields left out take the
// manifest's [sampling] defaults (as vLLM takes the model's generation
// config), not OpenAI's temperature 1.
func (c *openAICommon) apply(req *request) error {
	req.model = c.Model
	req.stream = c.Stream
	if c.N != nil && *c.N != 1 {
		return badRequest("n", "n = %d: specula returns one choice per request (n = 1)", *c.N)
	}
	if c.StreamOptions != nil && !c.Stream {
		return badRequest("stream_options", "stream_options is only allowed with stream: true")
	}
	max := c.MaxTokens
	param := "max_tokens"
	if c.MaxCompletionTokens != nil {
		max, param = c.MaxCompletionTokens, "max_completion_tokens"
	}
	if max != nil {
		if err := setMaxTokens(&req.eng, *max, param, false); err != nil {
			return err
		}
	}
	stops, err := decodeStops(c.Stop, "stop")
	if err != nil {
		return err
	}
	return setSampling(&req.eng, sampling{
		temperature: c.Temperature, topK: c.TopK, topP: c.TopP, minP: c.MinP, seed: c.Seed,
		repeatPenalty: c.RepetitionPenalty, presencePenalty: c.PresencePenalty, frequencyPenalty: c.FrequencyPenalty,
		stops: stops,
	}, openAINames)
}

// decodeOpenAIChat translates /v1/chat/completions into the internal
// request.
func decodeOpenAIChat(body *openAIChatRequest) (*request, error) {
	req := &request{}
	if err := body.apply(req); err != nil {
		return nil, err
	}
	if body.Model == "" {
		return nil, badRequest("model", "model is required: name one of the served models (GET /v1/models lists them)")
	}
	if len(body.Messages) == 0 {
		return nil, badRequest("messages", "messages is empty: send at least one message")
	}
	if rf := strings.TrimSpace(string(body.ResponseFormat)); rf != "" && rf != "null" {
		var f struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(body.ResponseFormat, &f); err != nil || f.Type != "text" {
			return nil, badRequest("response_format", "response_format %s is not supported: specula generates text only (leave it out, or {\"type\": \"text\"})", rf)
		}
	}
	if (body.Logprobs != nil && *body.Logprobs) || body.TopLogprobs != nil {
		return nil, badRequest("logprobs", "logprobs are not supported by specula")
	}
	if t := strings.TrimSpace(string(body.Tools)); t != "" && t != "null" && t != "[]" {
		return nil, badRequest("tools", "tools (function calling) are not supported by specula")
	}
	for i, m := range body.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		if err := checkRole(m.Role, param+".role"); err != nil {
			return nil, err
		}
		if t := strings.TrimSpace(string(m.ToolCalls)); t != "" && t != "null" && t != "[]" {
			return nil, badRequest(param+".tool_calls", "tool calls are not supported by specula")
		}
		text, err := messageText(m.Content, param+".content")
		if err != nil {
			return nil, err
		}
		role := m.Role
		if role == "developer" {
			role = "system" // OpenAI's newer name for the system role
		}
		req.eng.Messages = append(req.eng.Messages, tokenizer.Message{Role: role, Content: text})
	}
	args, err := templateKwargs(body.ChatTemplateKwargs)
	if err != nil {
		return nil, err
	}
	req.eng.ChatArgs = args
	return req, nil
}

// templateKwargs reads chat_template_kwargs: an object whose entries become
// chat template variables; enable_thinking, which specula reads itself,
// must be a boolean.
func templateKwargs(raw json.RawMessage) (map[string]any, error) {
	if t := strings.TrimSpace(string(raw)); t == "" || t == "null" {
		return nil, nil
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil, badRequest("chat_template_kwargs", "chat_template_kwargs must be an object of template variables, such as {\"enable_thinking\": true}")
	}
	if v, ok := args["enable_thinking"]; ok {
		if _, isBool := v.(bool); !isBool {
			return nil, badRequest("chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking must be true or false, not %v", v)
		}
	}
	return args, nil
}

// messageText reads a message's content: a string, null, or an array of
// {"type": "text", "text": ...} parts.
func messageText(raw json.RawMessage, param string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "%s must be a string or an array of text parts", param)
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return "", badRequest(fmt.Sprintf("%s[%d].type", param, i), "content part type %q is not supported: specula serves text models", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// decodeOpenAICompletion translates /v1/completions into the internal
// request: the prompt is sent as is (no chat template), as text or as
// token ids.
func decodeOpenAICompletion(body *openAICompletionRequest) (*request, error) {
	req := &request{}
	if err := body.apply(req); err != nil {
		return nil, err
	}
	if body.Model == "" {
		return nil, badRequest("model", "model is required: name one of the served models (GET /v1/models lists them)")
	}
	switch {
	case body.Suffix != nil && *body.Suffix != "":
		return nil, badRequest("suffix", "suffix (fill-in-the-middle) is not supported by specula")
	case body.Echo:
		return nil, badRequest("echo", "echo is not supported by specula")
	case body.BestOf != nil && *body.BestOf != 1:
		return nil, badRequest("best_of", "best_of = %d: specula returns one completion (best_of = 1)", *body.BestOf)
	case body.Logprobs != nil:
		return nil, badRequest("logprobs", "logprobs are not supported by specula")
	}
	var text string
	var texts []string
	var ids []int32
	raw := body.Prompt
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, badRequest("prompt", "prompt is required")
	case json.Unmarshal(raw, &text) == nil:
		req.eng.Prompt = text
	case json.Unmarshal(raw, &ids) == nil:
		req.eng.IDs = ids
	case json.Unmarshal(raw, &texts) == nil:
		if len(texts) != 1 {
			return nil, badRequest("prompt", "prompt holds %d strings: specula completes one prompt per request", len(texts))
		}
		req.eng.Prompt = texts[0]
	default:
		return nil, badRequest("prompt", "prompt must be a string, one string in an array, or an array of token ids")
	}
	if req.eng.Prompt == "" && len(req.eng.IDs) == 0 {
		return nil, badRequest("prompt", "prompt is empty")
	}
	return req, nil
}

// openAIUsage is OpenAI's usage object.
type openAIUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usage(r *engine.Response) *openAIUsage {
	u := &openAIUsage{PromptTokens: r.PromptTokens, CompletionTokens: len(r.IDs), TotalTokens: r.PromptTokens + len(r.IDs)}
	u.PromptTokensDetails.CachedTokens = r.CachedTokens
	return u
}

type openAIDelta struct {
	Role             string  `json:"role,omitempty"`
	Content          *string `json:"content,omitempty"`
	Reasoning        string  `json:"reasoning,omitempty"`
	ReasoningContent string  `json:"reasoning_content,omitempty"`
}

type openAIChoice struct {
	Index        int            `json:"index"`
	Message      *openAIMessage `json:"message,omitempty"`
	Delta        *openAIDelta   `json:"delta,omitempty"`
	Text         *string        `json:"text,omitempty"`
	Logprobs     any            `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
}

// openAIResponse is a completion, a chat completion or one of their stream
// chunks.
type openAIResponse struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	Created           int64          `json:"created"`
	Model             string         `json:"model"`
	SystemFingerprint string         `json:"system_fingerprint"`
	Choices           []openAIChoice `json:"choices"`
	Usage             *openAIUsage   `json:"usage,omitempty"`
	Speculation       *specStats     `json:"speculation,omitempty"`
}

func newID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func (srv *Server) handleChatCompletions(w http.ResponseWriter, r *http.Request) {
	if body, req, ok := decodeRequest(w, r, writeOpenAIError, decodeOpenAIChat); ok {
		srv.serveOpenAI(w, r, req, true, body.StreamOptions != nil && body.StreamOptions.IncludeUsage)
	}
}

func (srv *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	if body, req, ok := decodeRequest(w, r, writeOpenAIError, decodeOpenAICompletion); ok {
		srv.serveOpenAI(w, r, req, false, body.StreamOptions != nil && body.StreamOptions.IncludeUsage)
	}
}

// serveOpenAI runs a decoded request and writes OpenAI's answer: SSE chunks
// (a role chunk first for chat), a finish chunk, a usage chunk when asked,
// then [DONE]; or one object.
func (srv *Server) serveOpenAI(w http.ResponseWriter, r *http.Request, req *request, chat, includeUsage bool) {
	j, cancel, err := srv.submit(r, req)
	if err != nil {
		writeOpenAIError(w, err)
		return
	}
	defer cancel()
	s, _ := srv.lookup(req.model)
	base := openAIResponse{ID: newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(),
		Model: s.info.Name, SystemFingerprint: "specula-" + Version}
	if chat {
		base.ID, base.Object = newID("chatcmpl-"), "chat.completion"
	}
	chunk := func(choice openAIChoice) openAIResponse {
		c := base
		if chat {
			c.Object = "chat.completion.chunk"
		}
		c.Choices = []openAIChoice{choice}
		return c
	}
	var out *sse
	if req.stream {
		out = newSSE(w, srv.cfg.StallTimeout)
	}
	// emit writes a chunk, preceded in a chat by the role chunk. Nothing is
	// written before the first token: an error before it (a prompt the
	// engine refuses, a timeout in the queue) is still an HTTP status with
	// the error body, which clients raise as they raise any bad request.
	emit := func(c openAIResponse) error {
		if chat && !out.started {
			empty := ""
			if err := out.send(chunk(openAIChoice{Delta: &openAIDelta{Role: "assistant", Content: &empty}})); err != nil {
				return err
			}
		}
		return out.send(c)
	}
	// With enable_thinking the reasoning and the answer go apart (think.go).
	split := thinkingSplitter(req)
	piece := func(thinking, text string) openAIChoice {
		if chat {
			d := &openAIDelta{Reasoning: thinking, ReasoningContent: thinking}
			if text != "" || thinking == "" {
				d.Content = &text
			}
			return openAIChoice{Delta: d}
		}
		return openAIChoice{Text: &text}
	}
	// send streams a piece of output, split when asked.
	send := func(text string) error {
		thinking, text := split.feed(text)
		if thinking == "" && text == "" {
			return nil
		}
		return emit(chunk(piece(thinking, text)))
	}
	var text strings.Builder
	res := srv.wait(j, s.info.Name, cancel, func(t engine.Token) error {
		text.WriteString(t.Text)
		if out == nil {
			return nil
		}
		return send(t.Text)
	})
	if res.err != nil {
		if out != nil && out.started {
			_ = out.send(newOpenAIError(asAPIError(res.err)))
			_ = out.done()
			return
		}
		writeOpenAIError(w, res.err)
		return
	}
	resp := res.resp
	reason := doneReason(resp)
	stats := newSpecStats(resp)
	if out == nil {
		final := base
		content, thinking := resp.Text, ""
		if split != nil {
			thinking, content = splitThinking(content)
		}
		choice := openAIChoice{FinishReason: &reason}
		if chat {
			raw, _ := json.Marshal(content)
			choice.Message = &openAIMessage{Role: "assistant", Content: raw, Reasoning: thinking, ReasoningContent: thinking}
		} else {
			choice.Text = &content
		}
		final.Choices = []openAIChoice{choice}
		final.Usage = usage(resp)
		final.Speculation = stats
		writeJSON(w, http.StatusOK, final)
		return
	}
	if tail := streamTail(resp, text.String()); tail != "" {
		if send(tail) != nil {
			return
		}
	}
	if thinking, rest := split.flush(); thinking != "" || rest != "" {
		if emit(chunk(piece(thinking, rest))) != nil {
			return
		}
	}
	finish := chunk(openAIChoice{FinishReason: &reason})
	if chat {
		finish.Choices[0].Delta = &openAIDelta{}
	} else {
		empty := ""
		finish.Choices[0].Text = &empty
	}
	finish.Speculation = stats
	if emit(finish) != nil {
		return
	}
	if includeUsage {
		u := base
		if chat {
			u.Object = "chat.completion.chunk"
		}
		u.Choices = []openAIChoice{}
		u.Usage = usage(resp)
		u.Speculation = stats
		if out.send(u) != nil {
			return
		}
	}
	_ = out.done()
}

type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (srv *Server) openAIModel(s *slot) openAIModel {
	return openAIModel{ID: s.info.Name, Object: "model", Created: s.info.Modified.Unix(), OwnedBy: "specula"}
}

func (srv *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	data := []openAIModel{}
	for _, n := range srv.names() {
		data = append(data, srv.openAIModel(srv.slots[n]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (srv *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	s, err := srv.lookup(r.PathValue("model"))
	if err != nil {
		writeOpenAIError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, srv.openAIModel(s))
}
