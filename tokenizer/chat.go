package tokenizer

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// Message is one turn of a chat.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ErrNoChatTemplate is returned by ApplyChat when the checkpoint ships no
// chat template.
var ErrNoChatTemplate = errors.New("the checkpoint has no chat template (chat_template.jinja or tokenizer_config.json's chat_template)")

func init() {
	// gonja logs through logrus to stderr by default; a library must not
	// print.
	gonja.SetLoggerOutput(io.Discard)
}

// ApplyChat renders the checkpoint's chat template over messages as Hugging
// Face's apply_chat_template(messages, add_generation_prompt=...) does, with
// its Jinja settings (trim_blocks and lstrip_blocks on), and returns the
// prompt text. extra adds template variables (for Qwen3.5,
// "enable_thinking": false turns thinking off).
//
// Templates run on gonja (github.com/nikolalohinski/gonja/v2), a Jinja2 port
// for Go. It was chosen after rendering the real Qwen3 template and a
// whitespace-control case against Python's jinja2: gonja matched both, while
// ardanlabs/jinja v1.8.0 dropped newlines around a trimmed for-block.
func (d *Dir) ApplyChat(messages []Message, addGenerationPrompt bool, extra map[string]any) (string, error) {
	if d.ChatTemplate == "" {
		return "", ErrNoChatTemplate
	}
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	loader, err := loaders.NewShiftedLoader("chat_template", bytes.NewReader([]byte(d.ChatTemplate)), loaders.MustNewMemoryLoader(nil))
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	tmpl, err := exec.NewTemplate("chat_template", cfg, loader, gonja.DefaultEnvironment)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	// raised is the message of the template's own raise_exception, which
	// says what is wrong with the messages in the template author's words;
	// gonja would bury it under its trace of the control structures.
	var raised string
	data := map[string]any{
		"messages":              msgs,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             "",
		"eos_token":             "",
		// Hugging Face adds raise_exception to every template's globals.
		"raise_exception": func(msg string) (string, error) {
			raised = msg
			return "", fmt.Errorf("template raised: %s", msg)
		},
	}
	for k, v := range extra {
		data[k] = v
	}
	out, err := tmpl.ExecuteToString(exec.NewContext(data))
	if err != nil {
		if raised != "" {
			return "", fmt.Errorf("chat template: %s", raised)
		}
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}
