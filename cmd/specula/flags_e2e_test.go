package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Sampling flags out of range are usage errors: exit 2, nothing generated,
// one line on stderr naming the flag and its valid range (the manifest's
// words, package sample's rules). Edge values that keep a meaning run.
func TestE2ESamplingFlagsAreValidated(t *testing.T) {
	prompt, greedy := fixturePrompt(t)
	m := fixtureManifest(t, "dflash-tiny")
	bad := []struct {
		flags []string
		want  string
	}{
		{[]string{"--temperature", "nan"}, "specula run: --temperature NaN is not a finite number: want >= 0 (0 is greedy)"},
		{[]string{"--temperature", "-1"}, "specula run: --temperature -1 is out of range: want >= 0 (0 is greedy)"},
		{[]string{"--temperature", "inf"}, "specula run: --temperature +Inf is not a finite number"},
		{[]string{"--min-p", "1.5"}, "specula run: --min-p 1.5 is out of range: want 0 <= min-p <= 1 (0 disables min-p)"},
		{[]string{"--min-p", "-1"}, "specula run: --min-p -1 is out of range"},
		{[]string{"--top-p", "2"}, "specula run: --top-p 2 is out of range: want 0 < top-p <= 1 (1 disables top-p)"},
		{[]string{"--top-p", "-0.5"}, "specula run: --top-p -0.5 is out of range"},
		{[]string{"--top-p", "0"}, "specula run: --top-p 0 is out of range"},
		{[]string{"--top-k", "-1"}, "specula run: --top-k -1 is out of range: want >= 0 (0 disables top-k)"},
		{[]string{"--max-tokens", "-2"}, "specula run: --max-tokens -2 is out of range: want >= 1, or -1 to generate until a stop or the end of the context"},
		{[]string{"--max-tokens", "0"}, "specula run: --max-tokens 0 generates nothing"},
		{[]string{"--stop", ""}, `specula run: --stop "" is an empty string`},
	}
	for _, c := range bad {
		t.Run(strings.Join(c.flags, " "), func(t *testing.T) {
			args := append([]string{"run", "-m", m, "--ids", joinIDs(prompt)}, c.flags...)
			stdout, stderr, code := execSpecula(t, args...)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if code != 2 || stdout != "" || len(lines) < 1 || len(lines) > 4 || !strings.HasPrefix(lines[0], c.want) {
				t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 2, no output, first line %q", code, stdout, stderr, c.want)
			}
		})
	}
	// Edge values that leave only the greedy token, through the binary,
	// with and without the draft: the target's greedy tokens.
	for _, flags := range [][]string{
		{"--temperature", "1e-40", "--seed", "1"},
		{"--temperature", "0.8", "--top-k", "1"},
		{"--temperature", "0.8", "--min-p", "1"},
	} {
		for _, extra := range [][]string{nil, {"--no-draft"}} {
			args := append(append([]string{"run", "-m", m, "--ids", joinIDs(prompt), "--quiet"}, flags...), extra...)
			stdout, stderr, code := execSpecula(t, args...)
			if code != 0 || strings.TrimSpace(stdout) != strings.Join(strings.Split(joinIDs(greedy), ","), " ") {
				t.Fatalf("%v: exit %d, stdout %q (want the greedy %v)\n%s", args, code, stdout, greedy, stderr)
			}
		}
	}
}

// --help prints every subcommand's usage once, on stdout, exit 0; a bad
// flag gives its cause and a pointer to --help, two lines on stderr, exit 2.
func TestE2EHelpAndBadFlags(t *testing.T) {
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			stdout, stderr, code := execSpecula(t, name, "--help")
			if code != 0 || stderr != "" || strings.Count(stdout, "Usage") != 1 || !strings.Contains(stdout, "specula "+name) {
				t.Fatalf("%s --help: exit %d, stdout:\n%s\nstderr:\n%s", name, code, stdout, stderr)
			}
			stdout, stderr, code = execSpecula(t, name, "--no-such-flag")
			want := "specula " + name + ": flag provided but not defined: -no-such-flag\nsee 'specula " + name + " --help'\n"
			if code != 2 || stdout != "" || stderr != want {
				t.Fatalf("%s --no-such-flag: exit %d, stdout %q, stderr %q; want exit 2 and %q", name, code, stdout, stderr, want)
			}
		})
	}
	stdout, stderr, code := execSpecula(t, "run", "-m", "x.toml", "--temperature", "warm", "--ids", "1")
	want := "specula run: invalid value \"warm\" for flag -temperature: not a number\nsee 'specula run --help'\n"
	if code != 2 || stdout != "" || stderr != want {
		t.Fatalf("--temperature warm: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
	stdout, stderr, code = execSpecula(t, "help", "run")
	if code != 0 || stderr != "" || strings.Count(stdout, "Usage") != 1 {
		t.Fatalf("help run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// Input that would be ignored without a word is refused (flags) or warned
// about (environment variables), one line each.
func TestE2EIgnoredInputIsReported(t *testing.T) {
	m := fixtureManifest(t, "dflash-tiny")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-m", m, "--system", "be brief", "hello"}, "specula run: --system and --no-think shape the chat template: add --chat\n"},
		{[]string{"run", "-m", m, "--no-think", "hello"}, "specula run: --system and --no-think shape the chat template: add --chat\n"},
		{[]string{"run", "-m", m, "--chat", "--ids", "1,2"}, "specula run: --chat wraps a text prompt in the chat template; it cannot apply to --ids\n"},
		{[]string{"run", "-m", m, "--plugin-dir", "/nonexistent", "--ids", "1,2"}, "specula run: invalid value \"/nonexistent\" for flag -plugin-dir: no such folder\nsee 'specula run --help'\n"},
		{[]string{"plugins", "--plugin-dir", "/nonexistent"}, "specula plugins: invalid value \"/nonexistent\" for flag -plugin-dir: no such folder\nsee 'specula plugins --help'\n"},
	} {
		stdout, stderr, code := execSpecula(t, c.args...)
		if code != 2 || stdout != "" || stderr != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	// A stop string is matched against decoded text: without a tokenizer
	// it could never stop anything.
	stdout, stderr, code := execSpecula(t, "run", "-m", m, "--ids", "1,2", "--stop", "x", "--quiet")
	if want := "specula run: stop strings [\"x\"] need the target's tokenizer.json to match the text, and the target checkpoint has none: stop at token ids instead\n"; code != 1 || stdout != "" || stderr != want {
		t.Errorf("--stop without a tokenizer: exit %d, stdout %q, stderr %q; want exit 1 and %q", code, stdout, stderr, want)
	}
	for _, c := range []struct {
		env, want string
	}{
		{"SPECULA_LOG=verbose", "specula: warning: SPECULA_LOG=\"verbose\" is not a level (debug, info, warn or error): using warn\n"},
		{"SPECULA_DEVICE=bogus", "specula: warning: SPECULA_DEVICE=\"bogus\" is not a device (cpu or gpu): using the default, the GPU when this build has one\n"},
	} {
		cmd := exec.Command(specula(t), "archs")
		cmd.Env = append(os.Environ(), "SPECULA_LOG=warn", c.env)
		stdout, stderr, code := runCommand(t, cmd)
		if code != 0 || !strings.Contains(stdout, "Qwen3_5ForConditionalGeneration") || stderr != c.want {
			t.Errorf("%s specula archs: exit %d, stderr %q; want exit 0 and %q", c.env, code, stderr, c.want)
		}
	}
}

// serve's limits refuse values with no meaning (exit 2, one line naming
// the flag and its range) instead of quietly using their defaults.
func TestE2EServeFlagsAreValidated(t *testing.T) {
	m := fixtureManifest(t, "dflash-tiny")
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--max-queue", "0"}, "specula serve: --max-queue 0 is out of range: want >= 1\n"},
		{[]string{"--max-body", "-1"}, "specula serve: --max-body -1 is out of range: want >= 1\n"},
		{[]string{"--prompt-cache-bytes", "-1"}, "specula serve: --prompt-cache-bytes -1 is out of range: want >= 0 (0: no prompt cache)\n"},
		{[]string{"--request-timeout", "-1s"}, "specula serve: --request-timeout -1s is out of range: want >= 0 (0: no limit)\n"},
		{[]string{"--shutdown-grace", "-1s"}, "specula serve: --shutdown-grace -1s is out of range: want >= 0 (0: cancel running requests at once)\n"},
		{[]string{"--port", "70000"}, "specula serve: --port 70000 is out of range: want 0 to 65535\n"},
	} {
		stdout, stderr, code := execSpecula(t, append(append([]string{"serve"}, c.flags...), m)...)
		if code != 2 || stdout != "" || stderr != c.want {
			t.Errorf("serve %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.flags, code, stdout, stderr, c.want)
		}
	}
}

// run with no prompt opens the interactive chat only on a terminal.
// Standard input from /dev/null (cron, CI, nohup, ssh without a tty) is a
// character device but no terminal: run asks for a prompt (exit 2, before
// loading anything) instead of printing a chat's ">>> " and exiting 0.
func TestE2ERunWithoutPromptNeedsATerminal(t *testing.T) {
	m := fixtureManifest(t, "dflash-tiny")
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	cmd := exec.Command(specula(t), "run", "-m", m)
	cmd.Stdin = devNull
	cmd.Env = append(os.Environ(), "SPECULA_LOG=warn")
	stdout, stderr, code := runCommand(t, cmd)
	want := "specula run: a prompt (or --ids) is required; on a terminal, no prompt opens a chat\n"
	if code != exitUsage || stdout != "" || stderr != want {
		t.Fatalf("stdin %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", os.DevNull, code, stdout, stderr, want)
	}
}

// Commands that take no positional argument refuse one instead of ignoring
// it (`bench -m m.toml --depths 1 3`, `demo --random 64`), and a missing
// required flag gets its cause and the pointer to --help, as the README
// promises for usage errors. Nothing is loaded or written first.
func TestE2EUnexpectedAndMissingArguments(t *testing.T) {
	dir := t.TempDir()
	m := filepath.Join(dir, "never-read.toml")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "-m", m, "--oracle", "--depths", "1", "3"}, "specula bench: unexpected argument \"3\"\nsee 'specula bench --help'\n"},
		{[]string{"demo", "--random", "--dir", filepath.Join(dir, "demo"), "64"}, "specula demo: unexpected argument \"64\"\nsee 'specula demo --help'\n"},
		{[]string{"synth", "--shape", "go-tiny", "--out", filepath.Join(dir, "pair"), "--layers", "2", "4"}, "specula synth: unexpected argument \"4\"\nsee 'specula synth --help'\n"},
		{[]string{"plugins", "extra"}, "specula plugins: unexpected argument \"extra\"\nsee 'specula plugins --help'\n"},
		{[]string{"bench", "--repeats", "1"}, "specula bench: -m MANIFEST is required\nsee 'specula bench --help'\n"},
		{[]string{"synth", "--shape", "go-tiny"}, "specula synth: --out is required\nsee 'specula synth --help'\n"},
	} {
		stdout, stderr, code := execSpecula(t, c.args...)
		if code != exitUsage || stdout != "" || stderr != c.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	nothingLeftIn(t, dir)
}
