package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progressBar shows loading progress on stderr: a redrawn bar on a terminal,
// one line per finished phase otherwise (logs and tests stay readable).
type progressBar struct {
	w       io.Writer
	tty     bool
	doing   string // "loading": the bar's word while a phase runs
	did     string // "loaded": its word in the phase's summary line
	phase   string
	total   int64
	start   time.Time
	lastLen int
	drawn   time.Time
}

func newProgressBar(w io.Writer) *progressBar {
	f, ok := w.(*os.File)
	return &progressBar{w: w, tty: ok && isTerminal(f), doing: "loading", did: "loaded"}
}

// saying makes the bar say doing while a phase runs and did when it ends
// ("writing", "wrote") instead of "loading" and "loaded".
func (p *progressBar) saying(doing, did string) *progressBar {
	p.doing, p.did = doing, did
	return p
}

// update is an engine.Progress.
func (p *progressBar) update(phase string, done, total int64) {
	if phase != p.phase {
		p.finishPhase()
		p.phase, p.total, p.start = phase, total, time.Now()
	}
	p.total = total
	if !p.tty || (time.Since(p.drawn) < 100*time.Millisecond && done < total) {
		return
	}
	p.drawn = time.Now()
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	n := int(frac * width)
	line := fmt.Sprintf("%s %s [%s%s] %3.0f%% %s / %s", p.doing, phase, strings.Repeat("#", n), strings.Repeat("-", width-n), 100*frac, humanBytes(done), humanBytes(total))
	pad := max(0, p.lastLen-len(line))
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
	p.lastLen = len(line)
}

func (p *progressBar) finishPhase() {
	if p.phase == "" {
		return
	}
	msg := fmt.Sprintf("%s %s: %s in %.1fs", p.did, p.phase, humanBytes(p.total), time.Since(p.start).Seconds())
	if p.tty {
		pad := max(0, p.lastLen-len(msg))
		fmt.Fprintf(p.w, "\r%s%s\n", msg, strings.Repeat(" ", pad))
	} else {
		fmt.Fprintln(p.w, msg)
	}
	p.phase, p.lastLen = "", 0
}

// done ends the last phase.
func (p *progressBar) done() { p.finishPhase() }

// abandon ends the phase that failed, without its summary line; on a
// terminal it clears the bar so that the error starts a clean line.
func (p *progressBar) abandon() {
	if p.tty && p.lastLen > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.lastLen))
	}
	p.phase, p.lastLen = "", 0
}

// humanBytes formats a byte count in decimal units (1 GB = 10^9 bytes): the
// units of ollama's and mlx-lm's output and of our bandwidth figures (GB per
// token, TB/s), so that a checkpoint's size and the bytes a token reads
// compare directly.
func humanBytes(n int64) string {
	// A unit starts where the one below would round to 1000.0.
	switch {
	case n >= 999_950_000:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 999_950:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
