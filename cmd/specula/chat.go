package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/specula-dev/specula/engine"
	"github.com/specula-dev/specula/tokenizer"
)

// chatHelp lists the interactive chat's commands.
const chatHelp = `Commands:
  /bye      leave the chat (Ctrl-D too)
  /clear    forget the conversation so far
  /?        this help
Write """ to start a message of several lines and """ to end it.
Ctrl-C stops an answer; the conversation goes on (at the prompt it leaves).`

// chatSession is an interactive chat over one engine: the history of
// messages, each turn sent whole (the engine's prompt cache resumes where
// the previous turn ended).
type chatSession struct {
	eng     *engine.Engine
	base    engine.Request // sampling settings from the flags
	system  string
	args    map[string]any
	history []tokenizer.Message
	stdout  io.Writer
	stderr  io.Writer
	stats   bool // print the stats line after each answer
}

// loop reads messages from in until /bye or end of input. newTurnContext
// returns the context of one answer (cancelled by Ctrl-C in the program).
func (c *chatSession) loop(in io.Reader, newTurnContext func() (context.Context, context.CancelFunc)) error {
	// Every turn goes through the template: without one, say so before
	// asking for a first message that could only fail.
	if tok := c.eng.Tokenizer(); tok == nil || tok.ChatTemplate == "" {
		return fmt.Errorf("%w; the interactive chat needs one: give a prompt to continue text instead", tokenizer.ErrNoChatTemplate)
	}
	r := bufio.NewReader(in)
	fmt.Fprintln(c.stderr, `Chat with the model. /? for help, /bye to leave.`)
	for {
		fmt.Fprint(c.stdout, ">>> ")
		msg, err := readMessage(r, c.stdout)
		if errors.Is(err, io.EOF) && msg == "" {
			fmt.Fprintln(c.stdout)
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		switch strings.TrimSpace(msg) {
		case "":
			continue
		case "/bye":
			return nil
		case "/clear":
			c.history = nil
			fmt.Fprintln(c.stderr, "Cleared the conversation.")
			continue
		case "/?", "/help":
			fmt.Fprintln(c.stderr, chatHelp)
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(msg), "/") && !strings.Contains(strings.TrimSpace(msg), " ") {
			fmt.Fprintf(c.stderr, "Unknown command %s; /? lists the commands.\n", strings.TrimSpace(msg))
			continue
		}
		ctx, cancel := newTurnContext()
		answer, err := c.turn(ctx, msg)
		cancel()
		if err != nil {
			return err
		}
		_ = answer
	}
}

// turn sends the conversation with msg added and streams the answer. An
// interrupted answer is kept as far as it went.
func (c *chatSession) turn(ctx context.Context, msg string) (string, error) {
	req := c.base
	if c.system != "" {
		req.Messages = append(req.Messages, tokenizer.Message{Role: "system", Content: c.system})
	}
	req.Messages = append(append(req.Messages, c.history...), tokenizer.Message{Role: "user", Content: msg})
	req.ChatArgs = c.args
	resp, err := c.eng.Generate(ctx, req, func(t engine.Token) error {
		fmt.Fprint(c.stdout, t.Text)
		flush(c.stdout)
		return nil
	})
	interrupted := errors.Is(err, context.Canceled)
	if err != nil && !interrupted {
		return "", err
	}
	fmt.Fprintln(c.stdout)
	if interrupted {
		fmt.Fprintln(c.stderr, "(interrupted)")
	}
	if resp == nil {
		return "", nil
	}
	if c.stats {
		fmt.Fprintf(c.stderr, "%s, %d prompt tokens from the cache\n", statsLine(resp), resp.CachedTokens)
	}
	c.history = append(c.history, tokenizer.Message{Role: "user", Content: msg}, tokenizer.Message{Role: "assistant", Content: resp.Text})
	return resp.Text, nil
}

// readMessage reads one line, or the lines between """ and """.
func readMessage(r *bufio.Reader, prompt io.Writer) (string, error) {
	line, err := r.ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	rest, ok := strings.CutPrefix(line, `"""`)
	if !ok || err != nil {
		return line, err
	}
	if body, done := strings.CutSuffix(rest, `"""`); done && rest != "" {
		return body, nil
	}
	lines := []string{rest}
	for {
		fmt.Fprint(prompt, "... ")
		more, err := r.ReadString('\n')
		more = strings.TrimRight(more, "\r\n")
		if body, done := strings.CutSuffix(more, `"""`); done {
			if body != "" {
				lines = append(lines, body)
			}
			return strings.TrimLeft(strings.Join(lines, "\n"), "\n"), nil
		}
		lines = append(lines, more)
		if err != nil {
			return strings.Join(lines, "\n"), err
		}
	}
}

// interruptContext returns a context cancelled by Ctrl-C, for one answer.
// (At the prompt Ctrl-C ends the program, as the shell's default.)
func interruptContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}
