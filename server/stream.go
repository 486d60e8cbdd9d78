package server

import (
	"encoding/json"
	"net/http"
)

// ndjson writes ollama's stream: one JSON object per line, each flushed.
type ndjson struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	return &ndjson{w: w, rc: http.NewResponseController(w)}
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
	if _, err := s.w.Write(append(data, '\n')); err != nil {
		return err
	}
	return s.rc.Flush()
}

// sse writes OpenAI's stream: server-sent events "data: <json>\n\n", each
// flushed, ended by "data: [DONE]".
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func newSSE(w http.ResponseWriter) *sse {
	return &sse{w: w, rc: http.NewResponseController(w)}
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
	return s.write("data: " + string(data) + "\n\n")
}

// done ends the stream.
func (s *sse) done() error { return s.write("data: [DONE]\n\n") }

func (s *sse) write(text string) error {
	s.begin()
	if _, err := s.w.Write([]byte(text)); err != nil {
		return err
	}
	return s.rc.Flush()
}
