package server

import (
	"encoding/json"
	"net/http"
	"time"
)

// streamWriter writes a streamed answer, each piece flushed. A write that
// waits longer than stall (a client that stopped reading but keeps the
// connection open, its buffers full) fails, which cancels the generation:
// otherwise it would hold its model's worker, and the MLX worker every
// model shares, for as long as the client stays connected. (net/http
// clears the deadline after the handler, for the connection's next
// request.)
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	stall   time.Duration
	started bool
}

func (s *streamWriter) write(data []byte) error {
	if s.stall > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.stall))
	}
	if _, err := s.w.Write(data); err != nil {
		return err
	}
	return s.rc.Flush()
}

// ndjson writes ollama's stream: one JSON object per line, each flushed.
type ndjson struct{ streamWriter }

func newNDJSON(w http.ResponseWriter, stall time.Duration) *ndjson {
	return &ndjson{streamWriter{w: w, rc: http.NewResponseController(w), stall: stall}}
}

func (s *ndjson) send(v any) error {
	if !s.started {
		s.w.Header().Set("Content-Type", "application/x-ndjson")
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write(append(data, '\n'))
}

// sse writes OpenAI's stream: server-sent events "data: <json>\n\n", each
// flushed, ended by "data: [DONE]".
type sse struct{ streamWriter }

func newSSE(w http.ResponseWriter, stall time.Duration) *sse {
	return &sse{streamWriter{w: w, rc: http.NewResponseController(w), stall: stall}}
}

func (s *sse) begin() {
	if !s.started {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no") // proxies: do not buffer the stream
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
}

func (s *sse) send(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.event("data: " + string(data) + "\n\n")
}

// done ends the stream.
func (s *sse) done() error { return s.event("data: [DONE]\n\n") }

func (s *sse) event(text string) error {
	s.begin()
	return s.write([]byte(text))
}
