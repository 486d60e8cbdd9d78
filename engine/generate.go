package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/sample"
	"github.com/specula-dev/specula/speculation"
	"github.com/specula-dev/specula/tokenizer"
)

// Request is one generation request. Zero values take the manifest's
// [sampling] defaults, then the built-in ones (greedy, 256 tokens). Validate
// says whether its settings are in range; Generate refuses a request that is
// not.
type Request struct {
	// Prompt is text to encode with the target's tokenizer; ignored when
	// IDs or Messages is set.
	Prompt string
	// IDs is the prompt as token ids.
	IDs []int32
	// Messages is a chat, rendered with the target's chat template and an
	// assistant turn opened (Hugging Face's add_generation_prompt); it
	// replaces Prompt. ChatArgs adds template variables (Qwen3.5:
	// "enable_thinking": false).
	Messages []tokenizer.Message
	ChatArgs map[string]any
	// Context is token ids placed before the encoded Prompt or Messages
	// (ollama's context: a previous request's prompt and answer).
	Context []int32

	// MaxTokens bounds the generated tokens: 0 takes the default,
	// MaxTokensUntilDone (-1) generates until a stop or the end of the
	// target's context (max_position_embeddings).
	MaxTokens int
	// Temperature, TopK, TopP, MinP, the penalties and Seed override the
	// manifest's defaults when set (non-nil); their ranges and meanings are
	// package sample's (sample.Options, sample.CheckTemperature, ...). A
	// seeded sampled request runs at a fixed draft depth, so the same seed
	// reproduces the same tokens.
	Temperature      *float32
	TopK             *int
	TopP             *float32
	MinP             *float32
	RepeatPenalty    *float32
	PresencePenalty  *float32
	FrequencyPenalty *float32
	RepeatLastN      *int
	Seed             *uint64

	// StopIDs end generation like EOS (not emitted).
	StopIDs []int32
	// StopStrings end generation when the decoded text contains one (the
	// text up to it is emitted).
	StopStrings []string

	// NoDraft decodes plainly even when a draft is loaded.
	NoDraft bool

	// Drafter replaces the loaded draft for this request (benchmarks pass a
	// speculation.Oracle); FixedDepth > 0 pins the depth.
	Drafter    speculation.Drafter
	FixedDepth int

	// NoPipeline runs the request without overlapping host and device work
	// (speculation.Config.NoPipeline): the same tokens, usually slower.
	// SPECULA_PIPELINE=0 in the environment sets it for every request.
	NoPipeline bool
}

// pipelineOff is read once: SPECULA_PIPELINE=0 turns the host/device
// overlap off for every request, so one binary can be measured both ways.
var pipelineOff = os.Getenv("SPECULA_PIPELINE") == "0"

// chainOff is read once: SPECULA_CHAIN=0 turns chained rounds off
// (speculation.Config.NoChain) and leaves the rest of the pipeline on, so
// one binary can measure what chaining alone gives.
var chainOff = os.Getenv("SPECULA_CHAIN") == "0"

// MaxTokensUntilDone is the Request.MaxTokens that generates until a stop or
// the end of the target's context (ollama's num_predict = -1).
const MaxTokensUntilDone = sample.MaxTokensUntilDone

// FieldError is the error Validate returns: the setting (named as manifests
// name it: "temperature", "top_p", "max_tokens", "stop", ...), its value,
// and what range is valid. The command line and the HTTP APIs map Field to
// their own spelling of the setting and word the message with Reason.
type FieldError = sample.FieldError

// Validate checks every setting the request sets against the ranges
// manifests use (package sample's Check functions) and returns a
// *FieldError for the first one out of range. Values it accepts mean the
// same for speculative and plain decoding. Prompt ids and stop ids are
// checked against the vocabulary by Generate, which knows the target.
func (r Request) Validate() error {
	var errs []error
	if r.MaxTokens != 0 {
		errs = append(errs, sample.CheckMaxTokens(r.MaxTokens))
	}
	if r.Temperature != nil {
		errs = append(errs, sample.CheckTemperature(*r.Temperature))
	}
	if r.TopK != nil {
		errs = append(errs, sample.CheckTopK(*r.TopK))
	}
	if r.TopP != nil {
		errs = append(errs, sample.CheckTopP(*r.TopP))
	}
	if r.MinP != nil {
		errs = append(errs, sample.CheckMinP(*r.MinP))
	}
	if r.RepeatPenalty != nil {
		errs = append(errs, sample.CheckRepeatPenalty(*r.RepeatPenalty))
	}
	if r.PresencePenalty != nil {
		errs = append(errs, sample.CheckPresencePenalty(*r.PresencePenalty))
	}
	if r.FrequencyPenalty != nil {
		errs = append(errs, sample.CheckFrequencyPenalty(*r.FrequencyPenalty))
	}
	if r.RepeatLastN != nil {
		errs = append(errs, sample.CheckRepeatLastN(*r.RepeatLastN))
	}
	for _, id := range r.StopIDs {
		errs = append(errs, sample.CheckStopID(id, 0))
	}
	for _, s := range r.StopStrings {
		errs = append(errs, sample.CheckStopString(s))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Token is one streamed token: its id and the text it completes (may be ""
// while a multi-byte character is incomplete, or when there is no
// tokenizer).
type Token struct {
	ID   int32
	Text string
}

// Response is what Generate produced.
type Response struct {
	// IDs are the generated token ids in order: no EOS or stop id, but
	// the token that completed a stop string is kept (it was generated and
	// is in the caches; it may hold text before the stop string too).
	IDs []int32
	// Text is their decoded text, cut before a stop string (empty without
	// a tokenizer).
	Text string
	// DoneReason is "stop" (EOS, stop id or stop string) or "length".
	DoneReason string
	// Stats are the request's speculation counters.
	Stats speculation.Stats
	// PromptIDs is the prompt as the target saw it (Context, then the
	// encoded Prompt or Messages, or IDs).
	PromptIDs []int32
	// PromptTokens is the prompt length; PrefillTime the time to write it.
	PromptTokens int
	PrefillTime  time.Duration
	// CachedTokens is the number of leading prompt tokens the prompt cache
	// already held (not written again; 0 without a prompt cache).
	CachedTokens int
	// FirstTokenTime is the time from the call to the first emitted token.
	FirstTokenTime time.Duration
	// FirstEmitted is the number of tokens emitted with the first, by the
	// same round: 1 for plain decoding, up to the depth + 1 for a drafting
	// round (0 when nothing was emitted).
	FirstEmitted int
	// DecodeTime is the time from the first emitted token to the last.
	DecodeTime time.Duration
	// DecodeEval is the part of DecodeTime spent inside MLX's evaluation,
	// split into submitting graphs and waiting for the device (see
	// mlx.EvalTimes); zero unless mlx.SetEvalTiming is on (its Nodes,
	// unless mlx.SetNodeCounting is). The rest of DecodeTime is the host
	// building graphs and handling tokens.
	DecodeEval mlx.EvalTimes
	// Total is the wall time of the call.
	Total time.Duration
}

// TokensPerSecond is the decode rate after the first emission: the tokens
// emitted after the first round's over DecodeTime. The first round's tokens
// (FirstEmitted; taken as 1 when unset) arrive with the first token, so
// counting them would credit a drafting request with tokens decoded in no
// time — one round's worth of speedup that is not there.
func (r *Response) TokensPerSecond() float64 {
	n := len(r.IDs) - max(r.FirstEmitted, 1)
	if n < 1 || r.DecodeTime <= 0 {
		return 0
	}
	return float64(n) / r.DecodeTime.Seconds()
}

// defaultMaxTokens bounds requests that set no budget.
const defaultMaxTokens = 256

// errStop ends decoding early from the emit callback (a stop string).
var errStop = errors.New("stop string")

// Generate runs one request on the MLX worker, calling onToken for each
// emitted token (on the worker goroutine: keep it quick). Requests are
// serialised. Cancelling ctx stops between rounds and returns ctx.Err() with
// the partial response. Without a prompt cache the caches are released
// either way; with one (Options.PromptCacheBytes) they are kept for the next
// request, which resumes from the longest prefix of its prompt they can
// restore and gives the same tokens as it would from fresh caches.
func (e *Engine) Generate(ctx context.Context, req Request, onToken func(Token) error) (*Response, error) {
	start := time.Now()
	if err := req.Validate(); err != nil {
		return nil, err
	}
	prompt, marks, err := e.encode(req)
	if err != nil {
		return nil, &PromptError{err}
	}
	info := e.target.Info()
	vocab := info.VocabSize
	for i, id := range prompt {
		if id < 0 || (vocab > 0 && int(id) >= vocab) {
			return nil, &PromptError{fmt.Errorf("prompt token %d at position %d is outside the vocabulary [0, %d)", id, i, vocab)}
		}
	}
	for _, id := range req.StopIDs {
		if err := sample.CheckStopID(id, vocab); err != nil {
			return nil, err
		}
	}
	if n := info.ContextLength; n > 0 && len(prompt) >= n {
		return nil, &PromptError{fmt.Errorf("the prompt is %d tokens, but the model's context holds %d (max_position_embeddings) including the answer: shorten the prompt", len(prompt), n)}
	}
	opts, budget := e.sampling(req)
	budget = e.budget(budget, len(prompt), info.ContextLength)
	eos := slices.Concat(e.eos, req.StopIDs)
	for _, id := range e.plan.Sampling.StopTokens {
		eos = append(eos, int32(id))
	}
	stops := slices.Concat(e.plan.Sampling.StopStrings, req.StopStrings)
	if len(stops) > 0 && e.tok == nil {
		// Stop strings match decoded text; without a tokenizer they
		// would never match, and generation would run past them unsaid.
		return nil, &PromptError{fmt.Errorf("stop strings %q need the target's tokenizer.json to match the text, and the target checkpoint has none: stop at token ids instead", stops)}
	}

	resp := &Response{PromptIDs: prompt, PromptTokens: len(prompt)}
	var stream *tokenizer.Stream
	if e.tok != nil {
		stream = e.tok.Tokenizer.NewStream()
		stream.SkipSpecial = true
	}
	var text strings.Builder
	var firstAt, lastAt time.Time
	var firstEval, lastEval mlx.EvalTimes
	err = mlx.Do(ctx, func() error {
		if e.group != nil {
			if err := e.agree(&opts, &req); err != nil {
				return err
			}
		}
		if opts.UseSeed && opts.Temperature > 0 && req.FixedDepth == 0 && req.Drafter == nil {
			// The adaptive controller picks depths from wall-clock costs, and
			// each depth consumes random keys differently: a seeded sampled
			// request runs at a fixed depth so the same seed gives the same
			// tokens. (Greedy output never depends on the depth.)
			req.FixedDepth = e.seededDepth()
		}
		var res speculation.Result
		var emitErr error
		healthy := false // the caches are consistent when the request ends
		caches := e.acquireCaches(prompt, req)
		defer func() {
			caches.release(slices.Concat(prompt, res.Tokens, res.Rest), healthy)
			mlx.Sweep()
			mlx.ClearCache()
		}()
		resp.CachedTokens = caches.resumed
		core := e.newCore(eos, req, caches.target, caches.draft)
		s := core.Open(speculation.Request{Sampler: sample.New(opts, prompt), NoDraft: req.NoDraft})
		defer func() {
			s.Close()
			resp.Stats = *s.Stats()
			e.totals.Add(&resp.Stats)
		}()
		t0 := time.Now()
		scheduled := caches.schedule(append(marks, len(prompt)-1))
		seed, pos, err := s.Prefill(ctx, prompt, scheduled...)
		caches.take(scheduled)
		resp.PrefillTime = time.Since(t0)
		if err != nil {
			healthy = ctx.Err() != nil
			return err
		}
		d := s.Decoder(seed, pos)
		defer d.Close()
		res, err = speculation.Run(ctx, d, budget, func(id int32) error {
			now, ev := time.Now(), mlx.EvalTiming()
			if firstAt.IsZero() {
				firstAt, firstEval = now, ev
			}
			if d.Emissions() == 1 {
				resp.FirstEmitted++
			}
			lastAt, lastEval = now, ev
			resp.IDs = append(resp.IDs, id)
			tok := Token{ID: id}
			if stream != nil {
				tok.Text = stream.Add(id)
				begin := text.Len()
				text.WriteString(tok.Text)
				if cut, ok := stopAt(text.String(), stops); ok {
					// Emit the text before the stop string, then end.
					tok.Text = tok.Text[:max(0, cut-begin)]
					if onToken != nil && tok.Text != "" {
						if emitErr = onToken(tok); emitErr != nil {
							return emitErr
						}
					}
					return errStop
				}
			}
			if onToken != nil {
				emitErr = onToken(tok)
				return emitErr
			}
			return nil
		})
		// Run leaves the caches consistent when it stops between rounds or
		// at an emit; only an error from a round itself (MLX) may not.
		healthy = err == nil || errors.Is(err, errStop) || ctx.Err() != nil || (emitErr != nil && errors.Is(err, emitErr))
		switch {
		case errors.Is(err, errStop):
			resp.DoneReason = string(speculation.DoneStop)
			return nil
		case err != nil:
			return err
		}
		resp.DoneReason = string(res.Reason)
		return nil
	})
	resp.Total = time.Since(start)
	if !firstAt.IsZero() {
		resp.FirstTokenTime = firstAt.Sub(start)
		resp.DecodeTime = lastAt.Sub(firstAt)
		resp.DecodeEval = lastEval.Sub(firstEval)
	}
	if e.tok != nil {
		resp.Text, _ = e.tok.Tokenizer.Decode(resp.IDs, true)
		if cut, ok := stopAt(resp.Text, stops); ok {
			resp.Text = resp.Text[:cut]
		}
	}
	return resp, err
}

// PromptError is a prompt the engine cannot run: empty, a token outside the
// vocabulary, longer than the context, a chat the template refuses, or text
// for a target without a tokenizer. Servers answer it as a bad request.
type PromptError struct{ Err error }

func (e *PromptError) Error() string { return e.Err.Error() }

// Unwrap returns the cause (ErrNoTokenizer for text without a tokenizer).
func (e *PromptError) Unwrap() error { return e.Err }

// encode returns the request's prompt ids and the offsets inside it worth a
// prompt-cache checkpoint (message boundaries of a chat).
func (e *Engine) encode(req Request) (prompt []int32, marks []int, err error) {
	switch {
	case len(req.IDs) > 0:
		prompt = req.IDs
	case len(req.Messages) > 0:
		prompt, marks, err = e.encodeChat(req.Messages, req.ChatArgs)
		if err != nil {
			return nil, nil, err
		}
	default:
		if e.tok == nil {
			return nil, nil, ErrNoTokenizer
		}
		prompt = e.tok.Tokenizer.Encode(req.Prompt, tokenizer.EncodeOptions{})
	}
	if len(req.Context) > 0 && len(req.IDs) == 0 {
		for i := range marks {
			marks[i] += len(req.Context)
		}
		marks = append(marks, len(req.Context))
		prompt = slices.Concat(req.Context, prompt)
	}
	if len(prompt) == 0 {
		return nil, nil, errors.New("empty prompt")
	}
	return prompt, marks, nil
}

// encodeChat renders messages with the chat template and encodes them. The
// marks are where the first message ends (a system prompt other chats may
// share) and where the last one starts (a regenerated or edited last turn),
// when the rendering of those leading messages is a prefix of the whole in
// tokens too.
func (e *Engine) encodeChat(messages []tokenizer.Message, args map[string]any) ([]int32, []int, error) {
	if e.tok == nil {
		return nil, nil, ErrNoTokenizer
	}
	text, err := e.tok.ApplyChat(messages, true, args)
	if err != nil {
		return nil, nil, err
	}
	ids := e.tok.Tokenizer.Encode(text, tokenizer.EncodeOptions{})
	var marks []int
	heads := []int{1}
	if n := len(messages) - 1; n > 1 {
		heads = append(heads, n)
	}
	for _, k := range heads {
		if k >= len(messages) {
			continue
		}
		head, err := e.tok.ApplyChat(messages[:k], false, args)
		if err != nil || !strings.HasPrefix(text, head) {
			continue
		}
		if h := e.tok.Tokenizer.Encode(head, tokenizer.EncodeOptions{}); len(h) < len(ids) && slices.Equal(h, ids[:len(h)]) {
			marks = append(marks, len(h))
		}
	}
	return ids, marks, nil
}

// stopAt returns the index of the earliest stop string in text.
func stopAt(text string, stops []string) (int, bool) {
	best := -1
	for _, s := range stops {
		if s == "" {
			continue
		}
		if i := strings.Index(text, s); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return best, best >= 0
}

// Greedy reports whether req decodes greedily (temperature 0 once merged
// over the manifest's sampling defaults): then speculative output must equal
// plain output token for token.
func (e *Engine) Greedy(req Request) bool {
	o, _ := e.sampling(req)
	return o.Temperature == 0
}

// sampling merges the request over the manifest's defaults. The budget it
// returns may be MaxTokensUntilDone; see budget.
func (e *Engine) sampling(req Request) (sample.Options, int) {
	m := e.plan.Sampling
	var o sample.Options
	if m.Temperature != nil {
		o.Temperature = float32(*m.Temperature)
	}
	if m.TopK != nil {
		o.TopK = *m.TopK
	}
	if m.TopP != nil {
		o.TopP = float32(*m.TopP)
	}
	if m.MinP != nil {
		o.MinP = float32(*m.MinP)
	}
	if m.RepeatPenalty != nil {
		o.RepeatPenalty = float32(*m.RepeatPenalty)
	}
	if m.PresencePenalty != nil {
		o.PresencePenalty = float32(*m.PresencePenalty)
	}
	if m.FrequencyPenalty != nil {
		o.FrequencyPenalty = float32(*m.FrequencyPenalty)
	}
	o.RepeatLastN = 64
	if m.RepeatLastN != nil {
		o.RepeatLastN = *m.RepeatLastN
	}
	if m.Seed != nil {
		o.Seed, o.UseSeed = uint64(*m.Seed), true
	}
	budget := defaultMaxTokens
	if m.MaxTokens != nil {
		budget = *m.MaxTokens
	}
	if req.Temperature != nil {
		o.Temperature = *req.Temperature
	}
	if req.TopK != nil {
		o.TopK = *req.TopK
	}
	if req.TopP != nil {
		o.TopP = *req.TopP
	}
	if req.MinP != nil {
		o.MinP = *req.MinP
	}
	if req.Seed != nil {
		o.Seed, o.UseSeed = *req.Seed, true
	}
	if req.RepeatPenalty != nil {
		o.RepeatPenalty = *req.RepeatPenalty
	}
	if req.PresencePenalty != nil {
		o.PresencePenalty = *req.PresencePenalty
	}
	if req.FrequencyPenalty != nil {
		o.FrequencyPenalty = *req.FrequencyPenalty
	}
	if req.RepeatLastN != nil {
		o.RepeatLastN = *req.RepeatLastN
	}
	if req.MaxTokens != 0 {
		budget = req.MaxTokens
	}
	return o, budget
}

// budget turns the merged max_tokens into the number of tokens to generate
// after a prompt of n tokens, on a target trained for ctxLen positions (0:
// unknown). MaxTokensUntilDone fills the context (or, with no known context,
// runs until a stop). A budget that runs past the context is kept (the
// positions exist; quality may drop) with a warning.
func (e *Engine) budget(maxTokens, n, ctxLen int) int {
	switch {
	case maxTokens == MaxTokensUntilDone && ctxLen == 0:
		return math.MaxInt
	case maxTokens == MaxTokensUntilDone:
		if n >= ctxLen {
			e.log.Warn(fmt.Sprintf("the prompt (%d tokens) fills the target's context of %d positions (max_position_embeddings): max_tokens = -1 leaves nothing to generate", n, ctxLen))
			return 0
		}
		return ctxLen - n
	case ctxLen > 0 && n+maxTokens > ctxLen:
		e.log.Warn(fmt.Sprintf("the prompt (%d tokens) plus max_tokens (%d) exceed the target's context of %d positions (max_position_embeddings): output past position %d may degrade", n, maxTokens, ctxLen, ctxLen))
	}
	return maxTokens
}
