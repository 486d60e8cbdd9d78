package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter is an hclog.Logger that writes to a slog.Logger: go-plugin's
// own records and the plugin's stderr lines (which go-plugin parses from
// hclog JSON) become structured records of the host's log. It remembers the
// plugin's last warnings and errors so that a failed start can say why.
//
// What reaches the user's terminal (the host logs at warn by default) is
// kept to what they can act on: go-plugin's own records (its view of a
// process exiting, a graceful shutdown that failed) are demoted to debug,
// because the host reports those events itself, once, in its own words; and
// a plugin's panic becomes one warning with the panic value, its stack
// trace going to debug.
type hclogAdapter struct {
	log  *slog.Logger
	name string
	args []any
	// stderrName is the name go-plugin gives the logger of the plugin's
	// stderr (Named with the binary's file name).
	stderrName string
	// fromPlugin marks the adapter that receives the plugin's stderr.
	fromPlugin bool
	recent     *recentLines
	panic      *panicState
}

// panicState follows a plugin's stderr through a Go panic or fatal error:
// the first line carries the value, the lines after it are the trace.
type panicState struct {
	mu sync.Mutex
	in bool
}

// recentLines keeps the last few messages, for error reports.
type recentLines struct {
	mu    sync.Mutex
	lines []string
}

const recentMax = 8

func (r *recentLines) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, s)
	if len(r.lines) > recentMax {
		r.lines = r.lines[len(r.lines)-recentMax:]
	}
}

// recentLen bounds one remembered message.
const recentLen = 300

// raw returns a writer that remembers, among raw stderr lines (go-plugin
// writes each line, then a newline, to it), the warning and error records
// and the first line of a panic or fatal error (a plugin that is not built
// with the SDK, or dies before logging, has nothing else to say).
func (r *recentLines) raw() io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		var e struct {
			Level   string `json:"@level"`
			Message string `json:"@message"`
		}
		line := strings.TrimSpace(string(p))
		switch {
		case json.Unmarshal(p, &e) == nil:
			if (e.Level == "error" || e.Level == "warn") && e.Message != "" {
				r.add(clip(e.Message, recentLen))
			}
		case isPanicLine(line):
			r.add(clip(line, recentLen))
		}
		return len(p), nil
	})
}

// isPanicLine reports whether a stderr line starts a Go panic or fatal
// error report.
func isPanicLine(line string) bool {
	return strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ")
}

// String joins the remembered messages.
func (r *recentLines) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "; ")
}

// newHCLogAdapter returns the adapter of the plugin binary whose file name
// is binary, logging under name.
func newHCLogAdapter(log *slog.Logger, name, binary string) *hclogAdapter {
	return &hclogAdapter{log: log.With("logger", name), name: name, stderrName: binary, recent: &recentLines{}, panic: &panicState{}}
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Log writes one record. hclog passes key/value pairs; a lone trailing value
// is kept under "extra".
func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lv := slogLevel(level)
	switch {
	case !a.fromPlugin:
		// go-plugin's own record.
		lv = min(lv, slog.LevelDebug)
	case level == hclog.Error && isPanicLine(msg):
		a.panic.mu.Lock()
		a.panic.in = true
		a.panic.mu.Unlock()
		if a.log.Enabled(context.Background(), slog.LevelDebug) {
			break // the trace follows at debug: log the line with it
		}
		value := strings.TrimPrefix(strings.TrimPrefix(msg, "panic: "), "fatal error: ")
		a.log.Warn("plugin panicked (SPECULA_LOG=debug shows its stack trace)", "panic", value)
		return
	default:
		a.panic.mu.Lock()
		in := a.panic.in
		a.panic.mu.Unlock()
		if in {
			lv = min(lv, slog.LevelDebug) // the trace of a panic
		}
	}
	if !a.log.Enabled(context.Background(), lv) {
		return
	}
	all := append(append([]any(nil), a.args...), args...)
	if len(all)%2 == 1 {
		all = append(all[:len(all)-1], "extra", all[len(all)-1])
	}
	a.log.Log(context.Background(), lv, msg, all...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(l hclog.Level) bool {
	return a.log.Enabled(context.Background(), slogLevel(l))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.args }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.args = append(append([]any(nil), a.args...), args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

// Named is what go-plugin calls for the logger of the plugin's stderr
// (named after the binary) and of its own parts; the records keep the
// host's name (plugin.<name>).
func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	c.fromPlugin = name == a.stderrName
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger { return a.Named(name) }

// SetLevel is a no-op: the slog handler decides.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if a.enabled(l) {
			return l
		}
	}
	return hclog.Error
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		a.Info(strings.TrimRight(string(p), "\n"))
		return len(p), nil
	})
}

// syncStdout and syncStderr receive what the plugin writes to os.Stdout and
// os.Stderr while it serves: go-plugin points those at its stdio stream
// after the handshake, and drops the stream unless the host takes it, so an
// author's debugging output would vanish without a word. A stdout line is a
// warning (stdout is not the plugin's to use); a stderr line is filed as
// go-plugin files the plugin's own stderr lines (hclog JSON at its level,
// plain text at debug) and remembered for error reports.
func (a *hclogAdapter) syncStdout() io.Writer {
	from := a.Named(a.stderrName).(*hclogAdapter)
	return &lineWriter{line: func(line string) {
		from.recent.add(clip("stdout: "+line, recentLen))
		from.Warn("plugin wrote to stdout, which carries only the go-plugin handshake; log to stderr with slog instead", "text", clip(line, recentLen))
	}}
}

func (a *hclogAdapter) syncStderr() io.Writer {
	from := a.Named(a.stderrName).(*hclogAdapter)
	raw := from.recent.raw()
	return &lineWriter{line: func(line string) {
		_, _ = raw.Write([]byte(line))
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			from.Debug(line)
			return
		}
		msg, _ := rec["@message"].(string)
		level, _ := rec["@level"].(string)
		delete(rec, "@message")
		delete(rec, "@level")
		delete(rec, "@timestamp")
		keys := make([]string, 0, len(rec))
		for k := range rec {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		args := make([]any, 0, 2*len(keys))
		for _, k := range keys {
			args = append(args, k, rec[k])
		}
		from.Log(hclog.LevelFromString(level), msg, args...)
	}}
}

// lineWriter calls line for every complete line written to it (go-plugin's
// stdio stream delivers chunks as they were read); an overlong line is
// passed on in pieces of maxLineBytes.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

const maxLineBytes = 64 << 10

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 && len(w.buf) >= maxLineBytes {
			i = maxLineBytes
		}
		if i < 0 {
			break
		}
		w.line(strings.TrimRight(string(w.buf[:i]), "\r"))
		if i < len(w.buf) && w.buf[i] == '\n' {
			i++
		}
		w.buf = w.buf[i:]
	}
	if len(w.buf) == 0 {
		w.buf = nil // do not keep a large backing array alive
	}
	return len(p), nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
