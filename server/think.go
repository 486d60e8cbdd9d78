package server

import (
	"strings"
	"unicode"
)

// Thinking models (Qwen3.5 with enable_thinking) write their reasoning,
// then "</think>", then the answer; the chat template opens the block
// ("<think>\n" ends the prompt), though a model may repeat the opening tag.
// ollama returns the two apart when a request sets think: true — the
// reasoning in message.thinking (thinking for /api/generate), the answer in
// content — and vLLM when chat_template_kwargs sets enable_thinking (the
// reasoning in message.reasoning), so clients can fold the reasoning away.
// thinkSplitter does that split on streamed text, whose pieces may cut a tag
// anywhere.

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// thinkPhase is where a thinkSplitter is in the model's output.
type thinkPhase int

const (
	beforeThinking thinkPhase = iota // leading whitespace, maybe an opening tag
	afterOpenTag                     // whitespace after the model's own opening tag
	inThinking                       // the reasoning, up to the closing tag
	beforeAnswer                     // whitespace after the closing tag
	inAnswer                         // the answer: passed through
)

// thinkSplitter separates a thinking model's streamed output into reasoning
// and answer. The reasoning is trimmed of the whitespace around it and the
// answer of its leading whitespace, as ollama does; text that may be the
// start of a tag (or whitespace that may precede the closing tag) is held
// back until the next piece says what it is.
type thinkSplitter struct {
	phase thinkPhase
	held  string
}

// feed takes the next piece of output and returns what of it is now known
// to be reasoning and answer. A nil splitter (no thinking asked for) passes
// the output through as answer.
func (s *thinkSplitter) feed(text string) (thinking, answer string) {
	if s == nil {
		return "", text
	}
	buf := s.held + text
	s.held = ""
	for {
		switch s.phase {
		case beforeThinking:
			buf = strings.TrimLeftFunc(buf, unicode.IsSpace)
			switch {
			case buf == "":
				return thinking, answer
			case len(buf) < len(thinkOpen) && strings.HasPrefix(thinkOpen, buf):
				s.held = buf
				return thinking, answer
			case strings.HasPrefix(buf, thinkOpen):
				buf = buf[len(thinkOpen):]
				s.phase = afterOpenTag
				continue
			}
			s.phase = inThinking
		case afterOpenTag, beforeAnswer:
			buf = strings.TrimLeftFunc(buf, unicode.IsSpace)
			if buf == "" {
				return thinking, answer
			}
			if s.phase == afterOpenTag {
				s.phase = inThinking
			} else {
				s.phase = inAnswer
			}
		case inThinking:
			if i := strings.Index(buf, thinkClose); i >= 0 {
				thinking += strings.TrimRightFunc(buf[:i], unicode.IsSpace)
				buf = buf[i+len(thinkClose):]
				s.phase = beforeAnswer
				continue
			}
			keep := heldBack(buf)
			thinking += buf[:len(buf)-keep]
			s.held = buf[len(buf)-keep:]
			return thinking, answer
		case inAnswer:
			return thinking, answer + buf
		}
	}
}

// flush returns what is held back at the end of the output: reasoning cut
// off before its closing tag (a budget or a stop ended it) stays reasoning.
func (s *thinkSplitter) flush() (thinking, answer string) {
	if s == nil {
		return "", ""
	}
	held := s.held
	s.held = ""
	switch s.phase {
	case beforeThinking, afterOpenTag, inThinking:
		return strings.TrimRightFunc(held, unicode.IsSpace), ""
	}
	return "", held
}

// heldBack is how many trailing bytes of reasoning must wait for the next
// piece: a prefix of the closing tag, and the whitespace before it (trimmed
// if the tag follows).
func heldBack(buf string) int {
	keep := 0
	for n := min(len(buf), len(thinkClose)-1); n > 0; n-- {
		if strings.HasSuffix(buf, thinkClose[:n]) {
			keep = n
			break
		}
	}
	rest := strings.TrimRightFunc(buf[:len(buf)-keep], unicode.IsSpace)
	return len(buf) - len(rest)
}

// thinkingSplitter returns a splitter for a request that turned the chat
// template's enable_thinking on, else nil: the output is then returned
// whole.
func thinkingSplitter(req *request) *thinkSplitter {
	if on, _ := req.eng.ChatArgs["enable_thinking"].(bool); on {
		return &thinkSplitter{}
	}
	return nil
}

// splitThinking splits a whole output (a request that does not stream).
func splitThinking(text string) (thinking, answer string) {
	var s thinkSplitter
	th, an := s.feed(text)
	th2, an2 := s.flush()
	return th + th2, an + an2
}
