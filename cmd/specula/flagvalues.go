package main

import (
	"bufio"
	"io"
	"strconv"
	"strings"
	"time"
)

// optFloat, optInt and optUint are flags that remember whether they were set,
// so an unset flag leaves the manifest's default in place.
type optFloat struct {
	v   float64
	set bool
}

func (o *optFloat) String() string {
	if !o.set {
		return ""
	}
	return strconv.FormatFloat(o.v, 'g', -1, 64)
}

func (o *optFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return err
	}
	o.v, o.set = v, true
	return nil
}

type optInt struct {
	v   int
	set bool
}

func (o *optInt) String() string {
	if !o.set {
		return ""
	}
	return strconv.Itoa(o.v)
}

func (o *optInt) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	o.v, o.set = v, true
	return nil
}

type optUint struct {
	v   uint64
	set bool
}

func (o *optUint) String() string {
	if !o.set {
		return ""
	}
	return strconv.FormatUint(o.v, 10)
}

func (o *optUint) Set(s string) error {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return err
	}
	o.v, o.set = v, true
	return nil
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
	if bw, ok := w.(*bufio.Writer); ok {
		_ = bw.Flush()
	}
}
