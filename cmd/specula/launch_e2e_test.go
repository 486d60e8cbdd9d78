package main

import (
	"regexp"
	"strings"
	"testing"
)

// launch -n 2 runs the command twice and shows rank 0's output once.
func TestE2ELaunchShowsRankZero(t *testing.T) {
	stdout, stderr, code := execSpecula(t, "launch", "-n", "2", "--", "version")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "specula ") {
		t.Fatalf("stdout = %q, want rank 0's one version line", stdout)
	}
}

// A command that fails on its ranks ends the launch with the rank's status
// and a line naming the rank and how it ended.
func TestE2ELaunchReportsAFailedRank(t *testing.T) {
	_, stderr, code := execSpecula(t, "launch", "-n", "2", "--", "run", "-m", "/nonexistent/model.toml", "hi")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	if !regexp.MustCompile(`specula launch: rank [01] of 2 \(pid \d+\) exited with status 1`).MatchString(stderr) {
		t.Errorf("stderr does not name the failed rank and its status:\n%s", stderr)
	}
	if !strings.Contains(stderr, "/nonexistent/model.toml") {
		t.Errorf("stderr lacks the rank's own error:\n%s", stderr)
	}
}

func TestE2ELaunchUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"launch", "--", "version"}, "-n 0: give the number of ranks, at least 1"},
		{[]string{"launch", "-n", "2"}, "no command to run"},
		{[]string{"launch", "-n", "2", "--", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"launch", "-n", "2", "--", "launch", "-n", "2", "version"}, "a rank cannot launch ranks itself"},
		{[]string{"launch", "-n", "2", "--backend", "mpi", "--", "version"}, `unknown distributed backend "mpi" (known: ring, nccl)`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, stderr, code := execSpecula(t, c.args...)
			if code != exitUsage || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and %q", code, stderr, c.want)
			}
		})
	}
}
