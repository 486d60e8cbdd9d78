// Package jsonerr turns encoding/json's decoding errors into words for the
// people who wrote the file: where the problem is (line and column, the
// field's path) and what was expected, instead of Go's names ("cannot
// unmarshal string into Go struct field rawConfig.hidden_size of type int").
package jsonerr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Error is a decoding error of a JSON document, explained.
type Error struct {
	Line, Column int    // 1-based position of the problem; 0 when unknown
	Field        string // dotted path of the offending field, "" for the document or a syntax error
	Msg          string // what was found and what was expected
	Err          error  // encoding/json's error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "field %q ", e.Field)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns encoding/json's error.
func (e *Error) Unwrap() error { return e.Err }

// Explain returns err, an error of json.Unmarshal (or a json.Decoder) over
// data, as an *Error when it is a syntax or type error, else err unchanged.
func Explain(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		e := &Error{Msg: "is not valid JSON: " + syn.Error(), Err: err}
		e.Line, e.Column = position(data, syn.Offset)
		if syn.Offset == 1 && bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
			// encoding/json names the BOM's first byte as a Latin-1 'ï'.
			e.Msg = "is not valid JSON: the file starts with a UTF-8 byte order mark (EF BB BF), which JSON does not allow: save it without one"
		}
		if strings.Contains(syn.Error(), "unexpected end") {
			e.Msg += " (the file ends early: truncated?)"
			e.Line, e.Column = position(data, syn.Offset+1) // just past the end
		}
		if e.Line > 0 {
			e.Msg = strings.TrimPrefix(e.Msg, "is ")
		}
		return e
	case errors.As(err, &typ):
		e := &Error{Field: typ.Field, Msg: fmt.Sprintf("is %s, want %s", found(typ.Value), want(typ.Type)), Err: err}
		if e.Field == "" {
			e.Msg = fmt.Sprintf("the document is %s, want %s", found(typ.Value), want(typ.Type))
		}
		e.Line, e.Column = position(data, typ.Offset)
		return e
	}
	return err
}

// position returns the 1-based line and column of the last byte json read
// before it stopped (its errors' Offset counts the bytes read): the end of a
// value of the wrong type, or the character that breaks the syntax. An
// offset past the data is the place just after its end.
func position(data []byte, off int64) (line, col int) {
	if len(data) == 0 || off <= 0 {
		return 0, 0
	}
	i := int(min(off-1, int64(len(data))))
	line = 1 + bytes.Count(data[:i], []byte("\n"))
	col = i - bytes.LastIndexByte(data[:i], '\n')
	return line, col
}

// found names a JSON value as json.UnmarshalTypeError.Value describes it
// ("string", "number", "number 2.5", "bool", "array", "object").
func found(v string) string {
	switch {
	case v == "array":
		return "a list"
	case v == "object":
		return "an object"
	case v == "bool":
		return "true or false"
	case strings.HasPrefix(v, "number "):
		return strings.TrimPrefix(v, "number ")
	case v == "number":
		return "a number"
	case v == "string":
		return "a string"
	}
	return v
}

// want names what a Go type accepts.
func want(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list of " + plural(t.Elem())
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another value"
}

// plural names a list's elements.
func plural(t reflect.Type) string {
	switch w := want(t); w {
	case "an integer":
		return "integers"
	case "a non-negative integer":
		return "non-negative integers"
	case "a number":
		return "numbers"
	case "a string":
		return "strings"
	case "an object":
		return "objects"
	default:
		return "values"
	}
}
