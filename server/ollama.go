package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/tokenizer"
)

// ollama's native API: request and response shapes (docs/api.md of ollama),
// decoded into the internal request and encoded from the engine's answer.

type ollamaGenerateRequest struct {
	Model     string          `json:"model"`
	Prompt    string          `json:"prompt"`
	Suffix    string          `json:"suffix"`
	System    string          `json:"system"`
	Template  string          `json:"template"`
	Context   []int32         `json:"context"`
	Stream    *bool           `json:"stream"`
	Raw       bool            `json:"raw"`
	Format    json.RawMessage `json:"format"`
	Images    []string        `json:"images"`
	KeepAlive json.RawMessage `json:"keep_alive"`
	Options   ollamaOptions   `json:"options"`
	Think     json.RawMessage `json:"think"`
}

type ollamaMessage struct {
	Role      string          `json:"role"`
	Content   string          `json:"content"`
	Thinking  string          `json:"thinking,omitempty"`
	Images    []string        `json:"images,omitempty"`
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
}

type ollamaChatRequest struct {
	Model     string          `json:"model"`
	Messages  []ollamaMessage `json:"messages"`
	Stream    *bool           `json:"stream"`
	Format    json.RawMessage `json:"format"`
	KeepAlive json.RawMessage `json:"keep_alive"`
	Options   ollamaOptions   `json:"options"`
	Tools     json.RawMessage `json:"tools"`
	Think     json.RawMessage `json:"think"`
}

// ollamaOptions holds the options specula uses; ollama ignores options it
// does not know, and so does specula (num_ctx, num_gpu, mirostat, ...).
type ollamaOptions struct {
	NumPredict       *int            `json:"num_predict"`
	Temperature      *float64        `json:"temperature"`
	TopK             *int            `json:"top_k"`
	TopP             *float64        `json:"top_p"`
	MinP             *float64        `json:"min_p"`
	Seed             *int64          `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	RepeatPenalty    *float64        `json:"repeat_penalty"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	RepeatLastN      *int            `json:"repeat_last_n"`
}

// ollamaFinal is the last object of an answer (the only one without
// streaming): the done reason and the timings in nanoseconds.
type ollamaFinal struct {
	Model              string         `json:"model"`
	CreatedAt          string         `json:"created_at"`
	Response           *string        `json:"response,omitempty"`
	Thinking           string         `json:"thinking,omitempty"` // /api/generate with think: true
	Message            *ollamaMessage `json:"message,omitempty"`
	Done               bool           `json:"done"`
	DoneReason         string         `json:"done_reason,omitempty"`
	Context            []int32        `json:"context,omitempty"`
	TotalDuration      int64          `json:"total_duration,omitempty"`
	LoadDuration       int64          `json:"load_duration,omitempty"`
	PromptEvalCount    int            `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64          `json:"prompt_eval_duration,omitempty"`
	EvalCount          int            `json:"eval_count,omitempty"`
	EvalDuration       int64          `json:"eval_duration,omitempty"`
	Speculation        *specStats     `json:"speculation,omitempty"`
}

// ollamaChunk is one streamed piece.
type ollamaChunk struct {
	Model     string         `json:"model"`
	CreatedAt string         `json:"created_at"`
	Response  *string        `json:"response,omitempty"`
	Thinking  string         `json:"thinking,omitempty"` // /api/generate with think: true
	Message   *ollamaMessage `json:"message,omitempty"`
	Done      bool           `json:"done"`
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// engineRequest applies the options to an engine request.
func (o *ollamaOptions) apply(r *engine.Request) error {
	if o.NumPredict != nil {
		if err := setMaxTokens(r, *o.NumPredict, "options.num_predict", true); err != nil {
			return err
		}
	}
	stops, err := decodeStops(o.Stop, "options.stop")
	if err != nil {
		return err
	}
	return setSampling(r, sampling{
		temperature: o.Temperature, topK: o.TopK, topP: o.TopP, minP: o.MinP, seed: o.Seed,
		repeatPenalty: o.RepeatPenalty, presencePenalty: o.PresencePenalty, frequencyPenalty: o.FrequencyPenalty,
		repeatLastN: o.RepeatLastN, stops: stops,
	}, ollamaNames)
}

// ollamaNames spells the sampling settings as ollama's options do.
var ollamaNames = fieldNames{
	"temperature": "options.temperature", "top_k": "options.top_k", "top_p": "options.top_p",
	"min_p": "options.min_p", "seed": "options.seed", "repeat_penalty": "options.repeat_penalty",
	"presence_penalty": "options.presence_penalty", "frequency_penalty": "options.frequency_penalty",
	"repeat_last_n": "options.repeat_last_n", "max_tokens": "options.num_predict", "stop": "options.stop",
}

// refuseUnsupported answers fields specula does not implement with a clear
// 400 rather than ignoring them.
func refuseOllama(format json.RawMessage, images []string) error {
	if f := strings.TrimSpace(string(format)); f != "" && f != "null" && f != `""` {
		return badRequest("format", "format (structured output) is not supported by specula; leave it out and ask for JSON in the prompt")
	}
	if len(images) > 0 {
		return badRequest("images", "images are not supported: specula serves text models")
	}
	return nil
}

// thinkArgs maps ollama's think to the chat template's enable_thinking.
func thinkArgs(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, badRequest("think", "think must be true or false, not %s", raw)
	}
	return map[string]any{"enable_thinking": b}, nil
}

func (srv *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	if body, req, ok := decodeRequest(w, r, writeOllamaError, decodeOllamaGenerate); ok {
		srv.serveOllama(w, r, req, false, !body.Raw)
	}
}

// decodeOllamaGenerate translates /api/generate into the internal request.
func decodeOllamaGenerate(body *ollamaGenerateRequest) (*request, error) {
	if body.Suffix != "" {
		return nil, badRequest("suffix", "suffix (fill-in-the-middle) is not supported by specula")
	}
	if body.Template != "" {
		return nil, badRequest("template", "a per-request template is not supported: send the rendered prompt with \"raw\": true, or leave template out to use the model's chat template")
	}
	if err := refuseOllama(body.Format, body.Images); err != nil {
		return nil, err
	}
	req := &request{model: body.Model, stream: body.Stream == nil || *body.Stream}
	var err error
	if req.keepAlive, err = parseKeepAlive(body.KeepAlive); err != nil {
		return nil, err
	}
	if body.Prompt == "" && len(body.Context) == 0 {
		// ollama: an empty prompt loads the model, or unloads it with
		// keep_alive 0.
		req.op = opLoad
		if req.keepAlive != nil && *req.keepAlive == 0 {
			req.op = opUnload
		}
		return req, nil
	}
	args, err := thinkArgs(body.Think)
	if err != nil {
		return nil, err
	}
	switch {
	case body.Raw:
		if body.System != "" {
			return nil, badRequest("system", "system has no effect with raw: true (the prompt is sent as is); put it in the prompt")
		}
		req.eng.Prompt = body.Prompt
		if len(body.Context) > 0 {
			return nil, badRequest("context", "context is not used with raw: true; send the whole prompt")
		}
	default:
		if body.System != "" {
			req.eng.Messages = append(req.eng.Messages, tokenizer.Message{Role: "system", Content: body.System})
		}
		req.eng.Messages = append(req.eng.Messages, tokenizer.Message{Role: "user", Content: body.Prompt})
		req.eng.ChatArgs = args
		req.eng.Context = body.Context
	}
	if err := body.Options.apply(&req.eng); err != nil {
		return nil, err
	}
	return req, nil
}

func (srv *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	if _, req, ok := decodeRequest(w, r, writeOllamaError, decodeOllamaChat); ok {
		srv.serveOllama(w, r, req, true, false)
	}
}

// decodeOllamaChat translates /api/chat into the internal request.
func decodeOllamaChat(body *ollamaChatRequest) (*request, error) {
	if err := refuseOllama(body.Format, nil); err != nil {
		return nil, err
	}
	if t := strings.TrimSpace(string(body.Tools)); t != "" && t != "null" && t != "[]" {
		return nil, badRequest("tools", "tools (function calling) are not supported by specula")
	}
	req := &request{model: body.Model, stream: body.Stream == nil || *body.Stream}
	var err error
	if req.keepAlive, err = parseKeepAlive(body.KeepAlive); err != nil {
		return nil, err
	}
	if len(body.Messages) == 0 {
		// ollama: no messages loads the model (or unloads it with
		// keep_alive 0).
		req.op = opLoad
		if req.keepAlive != nil && *req.keepAlive == 0 {
			req.op = opUnload
		}
		return req, nil
	}
	msgs, err := chatMessages(body.Messages)
	if err != nil {
		return nil, err
	}
	req.eng.Messages = msgs
	if req.eng.ChatArgs, err = thinkArgs(body.Think); err != nil {
		return nil, err
	}
	if err := body.Options.apply(&req.eng); err != nil {
		return nil, err
	}
	return req, nil
}

// chatMessages checks ollama chat messages and converts them.
func chatMessages(in []ollamaMessage) ([]tokenizer.Message, error) {
	out := make([]tokenizer.Message, len(in))
	for i, m := range in {
		if err := checkRole(m.Role, fmt.Sprintf("messages[%d].role", i)); err != nil {
			return nil, err
		}
		if len(m.Images) > 0 {
			return nil, badRequest(fmt.Sprintf("messages[%d].images", i), "images are not supported: specula serves text models")
		}
		if t := strings.TrimSpace(string(m.ToolCalls)); t != "" && t != "null" && t != "[]" {
			return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls", i), "tool calls are not supported by specula")
		}
		out[i] = tokenizer.Message{Role: m.Role, Content: m.Content}
	}
	return out, nil
}

// checkRole accepts the chat roles templates know.
func checkRole(role, param string) error {
	switch role {
	case "system", "user", "assistant", "tool", "developer":
		return nil
	case "":
		return badRequest(param, "%s is missing: want system, user or assistant", param)
	}
	return badRequest(param, "%s %q is not a chat role: want system, user or assistant", param, role)
}

// serveOllama runs a decoded request and writes ollama's answer: NDJSON
// chunks then the final object, or one object. withContext returns the
// prompt and answer ids (generate without raw).
func (srv *Server) serveOllama(w http.ResponseWriter, r *http.Request, req *request, chat, withContext bool) {
	j, cancel, err := srv.submit(r, req)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	defer cancel()
	model := req.model
	if s, err := srv.lookup(req.model); err == nil {
		model = s.info.Name
	}
	// With think: true the reasoning and the answer go apart (think.go).
	split := thinkingSplitter(req)
	piece := func(thinking, text string) ollamaChunk {
		c := ollamaChunk{Model: model, CreatedAt: now()}
		if chat {
			c.Message = &ollamaMessage{Role: "assistant", Content: text, Thinking: thinking}
		} else {
			c.Response, c.Thinking = &text, thinking
		}
		return c
	}
	var out *ndjson
	if req.stream && req.op == opGenerate {
		out = newNDJSON(w, srv.cfg.StallTimeout)
	}
	// send streams a piece of output, split when asked.
	send := func(text string) error {
		thinking, text := split.feed(text)
		if thinking == "" && text == "" {
			return nil
		}
		return out.send(piece(thinking, text))
	}
	var text strings.Builder
	res := srv.wait(j, model, cancel, func(t engine.Token) error {
		text.WriteString(t.Text)
		if out == nil {
			return nil
		}
		return send(t.Text)
	})
	if res.err != nil {
		if out != nil && out.started {
			_ = out.send(map[string]string{"error": res.err.Error()})
			return
		}
		writeOllamaError(w, res.err)
		return
	}
	final := ollamaFinal{Model: model, CreatedAt: now(), Done: true, LoadDuration: res.Load.Nanoseconds()}
	switch req.op {
	case opLoad:
		final.DoneReason = "load"
	case opUnload:
		final.DoneReason = "unload"
	default:
		resp := res.resp
		final.DoneReason = doneReason(resp)
		final.TotalDuration = (res.Queued + res.Load + resp.Total).Nanoseconds()
		final.PromptEvalCount = resp.PromptTokens - resp.CachedTokens
		final.PromptEvalDuration = resp.PrefillTime.Nanoseconds()
		final.EvalCount = len(resp.IDs)
		final.EvalDuration = (resp.Total - resp.PrefillTime).Nanoseconds()
		final.Speculation = newSpecStats(resp)
		if withContext {
			final.Context = append(append([]int32{}, resp.PromptIDs...), resp.IDs...)
		}
	}
	if out == nil {
		content, thinking := "", ""
		if res.resp != nil {
			content = res.resp.Text
		}
		if split != nil {
			thinking, content = splitThinking(content)
		}
		if chat {
			final.Message = &ollamaMessage{Role: "assistant", Content: content, Thinking: thinking}
		} else {
			final.Response, final.Thinking = &content, thinking
		}
		writeJSON(w, http.StatusOK, final)
		return
	}
	if tail := streamTail(res.resp, text.String()); tail != "" {
		if send(tail) != nil {
			return
		}
	}
	if thinking, rest := split.flush(); thinking != "" || rest != "" {
		if out.send(piece(thinking, rest)) != nil {
			return
		}
	}
	empty := ""
	if chat {
		final.Message = &ollamaMessage{Role: "assistant", Content: empty}
	} else {
		final.Response = &empty
	}
	_ = out.send(final)
}

func (srv *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": Version})
}

// ollamaDetails is a model's details in /api/tags, /api/show and /api/ps.
type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

func details(info *modelInfo) ollamaDetails {
	family := info.M.Target.Architecture
	if family == "" {
		family = "qwen35"
	}
	families := []string{family}
	if info.M.Draft != nil && info.M.Draft.Architecture != "" {
		families = append(families, info.M.Draft.Architecture)
	}
	return ollamaDetails{Format: "safetensors", Family: family, Families: families,
		ParameterSize: sizeString(info.Size), QuantizationLevel: string(info.M.Target.DType)}
}

// sizeString is an approximate size of the weights ("1.2GB").
func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%dKB", n>>10)
}

type ollamaModelEntry struct {
	Name       string        `json:"name"`
	Model      string        `json:"model"`
	ModifiedAt string        `json:"modified_at,omitempty"`
	Size       int64         `json:"size"`
	Digest     string        `json:"digest"`
	Details    ollamaDetails `json:"details"`
	ExpiresAt  string        `json:"expires_at,omitempty"`
	SizeVRAM   int64         `json:"size_vram,omitempty"`
}

func (srv *Server) handleTags(w http.ResponseWriter, r *http.Request) {
	models := []ollamaModelEntry{}
	for _, n := range srv.names() {
		info := srv.slots[n].info
		models = append(models, ollamaModelEntry{Name: n, Model: n, ModifiedAt: info.Modified.UTC().Format(time.RFC3339Nano),
			Size: info.Size, Digest: info.Digest, Details: details(info)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

func (srv *Server) handlePs(w http.ResponseWriter, r *http.Request) {
	models := []ollamaModelEntry{}
	for _, n := range srv.names() {
		s := srv.slots[n]
		st := s.status()
		if !st.loaded {
			continue
		}
		e := ollamaModelEntry{Name: n, Model: n, Size: s.info.Size, Digest: s.info.Digest, Details: details(s.info)}
		if !st.expiresAt.IsZero() {
			e.ExpiresAt = st.expiresAt.UTC().Format(time.RFC3339Nano)
		}
		models = append(models, e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

func (srv *Server) handleShow(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Model string `json:"model"`
		Name  string `json:"name"` // older clients
	}
	if err := decodeJSON(r, &body); err != nil {
		writeOllamaError(w, err)
		return
	}
	if body.Model == "" {
		body.Model = body.Name
	}
	s, err := srv.lookup(body.Model)
	if err != nil {
		writeOllamaError(w, err)
		return
	}
	info := s.info
	m := info.M
	var params strings.Builder
	sp := m.Sampling
	if sp.Temperature != nil {
		fmt.Fprintf(&params, "temperature %g\n", *sp.Temperature)
	}
	if sp.TopK != nil {
		fmt.Fprintf(&params, "top_k %d\n", *sp.TopK)
	}
	if sp.TopP != nil {
		fmt.Fprintf(&params, "top_p %g\n", *sp.TopP)
	}
	if sp.MaxTokens != nil {
		fmt.Fprintf(&params, "num_predict %d\n", *sp.MaxTokens)
	}
	for _, s := range sp.StopStrings {
		fmt.Fprintf(&params, "stop %q\n", s)
	}
	modelInfo := map[string]any{
		"general.architecture": details(info).Family,
		"specula.manifest":     info.Manifest,
		"specula.target":       m.Target.Dir,
	}
	if m.Draft != nil {
		modelInfo["specula.draft"] = m.Draft.Dir
		modelInfo["specula.draft_architecture"] = m.Draft.Architecture
	}
	template := ""
	if tok, err := tokenizer.LoadDir(m.Target.Dir); err == nil {
		template = tok.ChatTemplate
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"modelfile":    fmt.Sprintf("# specula manifest %s\n", info.Manifest),
		"parameters":   params.String(),
		"template":     template,
		"details":      details(info),
		"model_info":   modelInfo,
		"capabilities": []string{"completion"},
		"modified_at":  info.Modified.UTC().Format(time.RFC3339Nano),
	})
}
