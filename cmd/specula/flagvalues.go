package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// opt is a flag that remembers whether it was set, so an unset flag leaves
// the manifest's default in place. parse reads the flag's text.
type opt[T any] struct {
	v     T
	set   bool
	parse func(string) (T, error)
}

func (o *opt[T]) String() string {
	if !o.set {
		return ""
	}
	return fmt.Sprint(o.v)
}

func (o *opt[T]) Set(s string) error {
	v, err := o.parse(s)
	if err != nil {
		return err
	}
	o.v, o.set = v, true
	return nil
}

// The option kinds the generation flags use.
type (
	optFloat = opt[float64]
	optInt   = opt[int]
	optUint  = opt[uint64]
)

// The parse errors are plain words: the flag package prefixes them with the
// flag and the value, and strconv's own ("strconv.ParseFloat: parsing ...")
// would repeat both.
func newOptFloat() optFloat {
	return optFloat{parse: func(s string) (float64, error) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, errors.New("not a number")
		}
		return v, nil
	}}
}

func newOptInt() optInt {
	return optInt{parse: func(s string) (int, error) {
		v, err := strconv.Atoi(s)
		if err != nil {
			return 0, errors.New("not an integer")
		}
		return v, nil
	}}
}

func newOptUint() optUint {
	return optUint{parse: func(s string) (uint64, error) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, errors.New("not an integer from 0 to 18446744073709551615")
		}
		return v, nil
	}}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// ms converts a duration to float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// flush flushes w when it buffers (streamed tokens should appear at once).
func flush(w io.Writer) {
	if f, ok := w.(interface{ Flush() error }); ok {
		_ = f.Flush()
	}
}
