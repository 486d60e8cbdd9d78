package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/speculation"
)

// decodeJSON reads the body into v, strictly typed: malformed JSON and
// wrong types are 400 errors naming the field, a body over the limit 413.
func decodeJSON(r *http.Request, v any) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return &apiError{Status: http.StatusRequestEntityTooLarge,
				Message: fmt.Sprintf("request body is larger than %d bytes (the server's --max-body)", tooLarge.Limit)}
		}
		return badRequest("", "reading the request body: %v", err)
	}
	return unmarshalRequest(data, v)
}

// decodeRequest reads a body of type B and translates it into the internal
// request; on an error it answers with fail (the API's error shape) and
// returns ok = false.
func decodeRequest[B any](w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, error), translate func(*B) (*request, error)) (body *B, req *request, ok bool) {
	body = new(B)
	if err := decodeJSON(r, body); err != nil {
		fail(w, err)
		return nil, nil, false
	}
	req, err := translate(body)
	if err != nil {
		fail(w, err)
		return nil, nil, false
	}
	return body, req, true
}

// unmarshalRequest decodes a request body (the part the fuzz tests drive).
func unmarshalRequest(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return badRequest("", "the request body is empty: send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return badRequest("", "the request body holds more than one JSON value")
	}
	return nil
}

// jsonError words a decoding error for a user: where the JSON is broken, or
// which field has the wrong type.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &syntax):
		return badRequest("", "malformed JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.As(err, &typ):
		field := clientField(typ.Field)
		if field == "" {
			return badRequest("", "the request body must be a JSON object, not %s", typ.Value)
		}
		return badRequest(field, "field %q: got %s, want %s", field, typ.Value, jsonKind(typ.Type.String()))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "malformed JSON: the body ends early")
	}
	return badRequest("", "malformed JSON: %v", err)
}

// embeddedName is the Go name of the struct both OpenAI request bodies
// embed. encoding/json puts it in a type error's field path
// ("openAICommon.seed"), where a client, who never sent it, would look for
// its own field name.
var embeddedName = reflect.TypeFor[openAICommon]().Name()

// clientField is a decoding error's field path as the client spelled it.
func clientField(path string) string {
	parts := strings.Split(path, ".")
	parts = slices.DeleteFunc(parts, func(p string) bool { return p == embeddedName })
	return strings.Join(parts, ".")
}

// jsonKind names a Go type the way a JSON user thinks of it.
func jsonKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["), strings.Contains(goType, "."):
		return "an object"
	case strings.HasPrefix(goType, "string"):
		return "a string"
	case strings.HasPrefix(goType, "bool"):
		return "true or false"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	}
	return goType
}

// parseKeepAlive reads ollama's keep_alive: a number of seconds or a Go
// duration string ("5m"); negative keeps the model loaded; absent (nil)
// means the server's default.
func parseKeepAlive(raw json.RawMessage) (*time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var d time.Duration
	var n float64
	var s string
	switch {
	case json.Unmarshal(raw, &n) == nil:
		if math.IsNaN(n) || math.Abs(n) > math.MaxInt64/float64(time.Second) {
			return nil, badRequest("keep_alive", "keep_alive %s is out of range", raw)
		}
		d = time.Duration(n * float64(time.Second))
	case json.Unmarshal(raw, &s) == nil:
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			if secs, err2 := strconv.ParseFloat(s, 64); err2 == nil && !math.IsNaN(secs) && math.Abs(secs) < math.MaxInt64/float64(time.Second) {
				d = time.Duration(secs * float64(time.Second))
			} else {
				return nil, badRequest("keep_alive", "keep_alive %q is not a duration: want seconds (300) or a duration (\"5m\", \"1h\"; negative keeps the model loaded)", s)
			}
		}
	default:
		return nil, badRequest("keep_alive", "keep_alive must be a number of seconds or a duration string, not %s", raw)
	}
	if d < 0 {
		d = -1
	}
	return &d, nil
}

// request is the internal request both APIs decode into.
type request struct {
	model     string
	op        jobOp
	eng       engine.Request
	stream    bool
	keepAlive *time.Duration
}

// outcome of a finished request, for the metrics.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "error"
}

// submit queues a request on its model's worker and returns the job to
// read the answer from. The job's context is the request's, bounded by the
// server's request timeout; cancel releases it.
func (srv *Server) submit(r *http.Request, req *request) (*job, context.CancelFunc, error) {
	s, err := srv.lookup(req.model)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(r.Context())
	if srv.cfg.RequestTimeout > 0 {
		ctx, cancel = context.WithTimeout(r.Context(), srv.cfg.RequestTimeout)
	}
	j := &job{ctx: ctx, req: req.eng, keepAlive: req.keepAlive, op: req.op,
		tokens: make(chan engine.Token, tokenBuffer), done: make(chan jobResult, 1)}
	if err := s.submit(j); err != nil {
		cancel()
		srv.metrics.request(s.info.Name, "busy", nil, 0)
		return nil, nil, err
	}
	return j, cancel, nil
}

// wait reads a job to its end, calling onToken for each token. An error
// from onToken (the client is gone: a write failed) cancels the job, so
// its generation stops at the next round. It records the request's
// metrics.
func (srv *Server) wait(j *job, model string, cancel context.CancelFunc, onToken func(engine.Token) error) jobResult {
	var tokErr error
	for {
		select {
		case t := <-j.tokens:
			if tokErr == nil {
				if tokErr = onToken(t); tokErr != nil {
					cancel()
				}
			}
		case res := <-j.done:
			// Tokens sent before the result are still buffered.
			for drained := false; !drained; {
				select {
				case t := <-j.tokens:
					if tokErr == nil {
						tokErr = onToken(t)
					}
				default:
					drained = true
				}
			}
			if res.err == nil && tokErr != nil {
				res.err = tokErr
			}
			if tokErr != nil && !errors.Is(res.err, context.Canceled) {
				// The answer could not be written: the client is gone.
				res.err = fmt.Errorf("%w: writing the answer: %v", context.Canceled, tokErr)
			}
			if j.op == opGenerate {
				var latency float64
				if res.resp != nil {
					latency = res.Queued.Seconds() + res.Load.Seconds() + res.resp.Total.Seconds()
				}
				srv.metrics.request(model, outcome(res.err), res.resp, latency)
			}
			res.err = requestError(res.err, j.ctx)
			return res
		}
	}
}

// requestError maps an engine or context error to what the client is told.
func requestError(err error, ctx context.Context) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusGatewayTimeout, Message: "the request ran past the server's time limit (--request-timeout) and was stopped"}
	case errors.Is(err, context.Canceled):
		return &apiError{Status: StatusClientClosed, Message: "the client closed the request"}
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var pe *engine.PromptError
	if errors.As(err, &pe) {
		return badRequest("", "%v", pe.Err)
	}
	return &apiError{Status: http.StatusInternalServerError, Message: err.Error()}
}

// specStats is the "speculation" extension field of both APIs' final
// answer: the request's speculative-decoding counters (vLLM's per-request
// metrics under names that say what they count).
type specStats struct {
	// DraftRounds counts verification rounds that checked drafts
	// (vLLM's num_spec_steps).
	DraftRounds int `json:"draft_rounds"`
	// Drafted and Accepted count draft tokens verified and accepted.
	Drafted  int `json:"drafted"`
	Accepted int `json:"accepted"`
	// MeanAcceptanceLength is 1 + accepted / draft_rounds: tokens per
	// verification, the bonus token included (0 without drafting).
	MeanAcceptanceLength float64 `json:"mean_acceptance_length"`
	// AcceptanceRate is accepted / drafted.
	AcceptanceRate float64 `json:"acceptance_rate"`
	// AcceptanceByPosition[i] is the acceptance of draft position i+1 given
	// that it was drafted.
	AcceptanceByPosition []float64 `json:"acceptance_by_position"`
	// Fallbacks counts the rounds decoded plainly, by reason.
	Fallbacks map[string]int `json:"fallbacks"`
	// DepthPolicy says how the draft depth was chosen.
	DepthPolicy string `json:"depth_policy"`
	// CachedTokens counts the prompt tokens served from the prompt cache.
	CachedTokens int `json:"cached_tokens"`
}

func newSpecStats(r *engine.Response) *specStats {
	if r == nil {
		return nil
	}
	st := r.Stats
	out := &specStats{
		DraftRounds:          st.DraftRounds,
		Drafted:              st.Drafted,
		Accepted:             st.Accepted,
		MeanAcceptanceLength: round4(st.MeanAcceptanceLength()),
		AcceptanceRate:       round4(st.AcceptanceRate()),
		AcceptanceByPosition: st.PerPositionAcceptance(),
		Fallbacks:            st.Fallback,
		DepthPolicy:          st.DepthPolicy,
		CachedTokens:         r.CachedTokens,
	}
	for i, a := range out.AcceptanceByPosition {
		out.AcceptanceByPosition[i] = round4(a)
	}
	if out.Fallbacks == nil {
		out.Fallbacks = map[string]int{}
	}
	return out
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// doneReason is the engine's done reason in both APIs' words ("stop",
// "length").
func doneReason(r *engine.Response) string {
	if r == nil || r.DoneReason == "" {
		return string(speculation.DoneStop)
	}
	return r.DoneReason
}

// streamTail is the text of the answer a stream has not sent yet: the
// streaming detokenizer holds back the bytes of an unfinished character,
// which the full decoding of the answer renders (as U+FFFD) when the answer
// ends inside one.
func streamTail(r *engine.Response, streamed string) string {
	if r == nil {
		return ""
	}
	if tail, ok := strings.CutPrefix(r.Text, streamed); ok {
		return tail
	}
	return ""
}
