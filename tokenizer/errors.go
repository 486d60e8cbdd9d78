package tokenizer

import (
	"errors"
	"fmt"
)

// ErrUnsupported is wrapped by a FormatError that rejects a well-formed file
// because it asks for a feature this package does not implement (a model type
// other than BPE, an unknown split pattern, a normalizer other than NFC...).
var ErrUnsupported = errors.New("unsupported by this tokenizer package")

// FormatError reports a file that cannot be used: malformed JSON, a field with
// a wrong value, or (wrapping ErrUnsupported) a feature this package lacks.
type FormatError struct {
	File  string // the file's path, or the name given to Parse
	Field string // JSON path of the offending field, e.g. "model.merges[12]"; empty for the whole file
	Msg   string // what was found and, where it helps, what would fix it
	Err   error  // the underlying cause, if any (ErrUnsupported, a JSON error)
}

// Error returns "file: field: message".
func (e *FormatError) Error() string {
	where := e.File
	if e.Field != "" {
		where += ": " + e.Field
	}
	if e.Err != nil && !errors.Is(e.Err, ErrUnsupported) {
		return fmt.Sprintf("%s: %s: %v", where, e.Msg, e.Err)
	}
	return where + ": " + e.Msg
}

// Unwrap returns the underlying cause.
func (e *FormatError) Unwrap() error { return e.Err }

// fieldError builds a FormatError for a field of file.
func fieldError(file, field, format string, args ...any) *FormatError {
	return &FormatError{File: file, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// unsupported builds a FormatError wrapping ErrUnsupported.
func unsupported(file, field, format string, args ...any) *FormatError {
	return &FormatError{File: file, Field: field, Msg: fmt.Sprintf(format, args...), Err: ErrUnsupported}
}
