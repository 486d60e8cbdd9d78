package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// StatusClientClosed is the status logged for a request whose client went
// away before it finished (nginx's 499, which ollama uses too). The client
// never sees it.
const StatusClientClosed = 499

// apiError is an error with the HTTP status it answers with. Both APIs
// render it in their own shape: ollama's {"error": message}, OpenAI's
// {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	Status int
	// Message says what was wrong and what would fix it.
	Message string
	// Param names the request field at fault, in the API's own spelling
	// ("" when none).
	Param string
	// RetryAfter, when > 0, becomes a Retry-After header (503 busy).
	RetryAfter time.Duration
	// Code, when set, is OpenAI's machine-readable code; otherwise the
	// status gives it (codeFor).
	Code string
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// asAPIError maps any error to an apiError (500 when it is not one).
func asAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return &apiError{Status: http.StatusInternalServerError, Message: err.Error()}
}

// openAIType is OpenAI's error type for a status.
func openAIType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		return "server_busy_error"
	case status == http.StatusRequestEntityTooLarge:
		return "invalid_request_error"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	default:
		return "server_error"
	}
}

// setRetryAfter writes the Retry-After header of a busy answer.
func setRetryAfter(w http.ResponseWriter, e *apiError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
}

// writeOllamaError answers with ollama's error shape.
func writeOllamaError(w http.ResponseWriter, err error) {
	e := asAPIError(err)
	setRetryAfter(w, e)
	writeJSON(w, e.Status, map[string]string{"error": e.Message})
}

// openAIError is OpenAI's error body.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func newOpenAIError(e *apiError) openAIError {
	body := openAIErrorBody{Message: e.Message, Type: openAIType(e.Status)}
	if e.Param != "" {
		body.Param = &e.Param
	}
	code := e.Code
	if code == "" {
		code = codeFor(e.Status)
	}
	if code != "" {
		body.Code = &code
	}
	return openAIError{Error: body}
}

// codeFor is the machine-readable code OpenAI-style clients switch on, for
// the statuses that have one whatever the cause (a 404 has none: an unknown
// model's error carries model_not_found itself, a missing route nothing).
func codeFor(status int) string {
	switch status {
	case http.StatusServiceUnavailable:
		return "server_busy"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusUnauthorized:
		return "invalid_api_key"
	case http.StatusGatewayTimeout:
		return "timeout"
	}
	return ""
}

// writeOpenAIError answers with OpenAI's error shape.
func writeOpenAIError(w http.ResponseWriter, err error) {
	e := asAPIError(err)
	setRetryAfter(w, e)
	writeJSON(w, e.Status, newOpenAIError(e))
}
