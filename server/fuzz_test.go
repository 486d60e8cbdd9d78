package server

import (
	"encoding/json"
	"errors"
	"testing"
)

// The request decoders take any bytes a client sends: they must answer with
// a request or a 4xx apiError, never panic. Seeds are real requests of each
// API and a few broken ones.

// checkDecodeError fails unless err is nil or a client error.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) || ae.Status < 400 || ae.Status >= 500 || ae.Message == "" {
		t.Fatalf("decoder returned %T %v, want a 4xx apiError", err, err)
	}
}

func FuzzDecodeOllama(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hi","options":{"num_predict":5,"temperature":0.7,"stop":["\n"]},"keep_alive":"5m"}`,
		`{"model":"m","prompt":"hi","raw":true,"stream":false,"keep_alive":0}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"think":false,"options":{"top_p":0.9,"seed":-1}}`,
		`{"model":"m","messages":[],"keep_alive":-1}`,
		`{"model":"m","prompt":"x","context":[1,2,3],"options":{"num_predict":-2}}`,
		`{"model":"m","prompt":"x","options":{"top_k":"5"}}`,
		`{"model":`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var g ollamaGenerateRequest
		if err := unmarshalRequest(data, &g); err == nil {
			_, err = decodeOllamaGenerate(&g)
			checkDecodeError(t, err)
		} else {
			checkDecodeError(t, jsonError(err))
		}
		var c ollamaChatRequest
		if err := unmarshalRequest(data, &c); err == nil {
			_, err = decodeOllamaChat(&c)
			checkDecodeError(t, err)
		} else {
			checkDecodeError(t, jsonError(err))
		}
	})
}

func FuzzDecodeOpenAI(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":8,"temperature":0,"stop":"\n"}`,
		`{"model":"m","prompt":"hi","max_tokens":4,"seed":3,"top_p":1,"presence_penalty":0.5}`,
		`{"model":"m","prompt":[1,2,3],"n":1,"best_of":1}`,
		`{"model":"m","prompt":["a","b"]}`,
		`{"model":"m","messages":[{"role":"user","content":null}],"response_format":{"type":"json_object"}}`,
		`{"model":"m","max_completion_tokens":-1,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":`, `{}`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c openAIChatRequest
		if err := unmarshalRequest(data, &c); err == nil {
			_, err = decodeOpenAIChat(&c)
			checkDecodeError(t, err)
		} else {
			checkDecodeError(t, jsonError(err))
		}
		var p openAICompletionRequest
		if err := unmarshalRequest(data, &p); err == nil {
			_, err = decodeOpenAICompletion(&p)
			checkDecodeError(t, err)
		} else {
			checkDecodeError(t, jsonError(err))
		}
	})
}

func FuzzKeepAlive(f *testing.F) {
	for _, s := range []string{`300`, `"5m"`, `-1`, `"0s"`, `"1.5"`, `1e300`, `"-3h"`, `true`, `"soon"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		d, err := parseKeepAlive(data)
		checkDecodeError(t, err)
		if err == nil && d != nil && *d < -1 {
			t.Fatalf("keep_alive %s gave %v: negatives mean forever (-1)", data, *d)
		}
	})
}
