package tokenizer

import (
	"errors"
	"path/filepath"
	"testing"
)

// The expected text is what Hugging Face's apply_chat_template produces with
// the ChatML layout every Qwen template shares (hand-written here).
func TestApplyChatChatML(t *testing.T) {
	d := &Dir{ChatTemplate: `{%- for m in messages -%}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor -%}{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}`}
	got, err := d.ApplyChat([]Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "Hi <b>!"}}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nHi <b>!<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestApplyChatQwen3Template(t *testing.T) {
	qwen3Tokenizer(t) // fails with set-up advice when the file is missing
	d, err := LoadDir(filepath.Dir(qwen3.path))
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.ApplyChat([]Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "Hello <there>!"}}, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nHello <there>!<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestApplyChatWithoutTemplate(t *testing.T) {
	if _, err := (&Dir{}).ApplyChat(nil, true, nil); !errors.Is(err, ErrNoChatTemplate) {
		t.Fatalf("err %v, want ErrNoChatTemplate", err)
	}
}

// A template that refuses the messages (raise_exception, as Qwen3.5's does
// for a chat without a user turn) is reported in its own words, not under
// the template engine's trace of the blocks it was in.
func TestApplyChatReportsTheTemplatesOwnError(t *testing.T) {
	d := &Dir{ChatTemplate: "{%- for m in messages %}{%- if m.role == 'system' and not loop.first %}" +
		"{{- raise_exception('the system turn must come first') }}{%- endif %}{{- m.content }}{%- endfor %}"}
	_, err := d.ApplyChat([]Message{{Role: "user", Content: "a"}, {Role: "system", Content: "b"}}, true, nil)
	if err == nil || err.Error() != "chat template: the system turn must come first" {
		t.Fatalf("err %v, want the template's own message", err)
	}
	if got, err := d.ApplyChat([]Message{{Role: "system", Content: "b"}, {Role: "user", Content: "a"}}, true, nil); err != nil || got != "ba" {
		t.Fatalf("got %q, %v; want \"ba\"", got, err)
	}
}
