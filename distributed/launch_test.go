package distributed_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/specula-dev/specula/distributed"
)

// echoChild prints its rank's environment on stdout and a line on stderr.
func echoChild() error {
	fmt.Printf("rank %s of %s, backend %s, hostfile set %v\n", os.Getenv(distributed.EnvRank),
		os.Getenv(distributed.EnvWorldSize), os.Getenv(distributed.EnvBackend), os.Getenv(distributed.EnvHostfile) != "")
	fmt.Fprintf(os.Stderr, "stderr of rank %s\n", os.Getenv(distributed.EnvRank))
	return nil
}

// failChild: the rank named by FAIL_RANK ends as FAIL_HOW says (exit 3,
// or SIGKILL itself) once every rank has started; the others wait a minute,
// which the launcher must cut short.
func failChild() error {
	if os.Getenv(distributed.EnvRank) != os.Getenv("FAIL_RANK") {
		time.Sleep(time.Minute)
		return fmt.Errorf("not ended by the launcher")
	}
	time.Sleep(200 * time.Millisecond)
	fmt.Fprintln(os.Stderr, "rank", os.Getenv(distributed.EnvRank), "gives up: the fixture told it to")
	if os.Getenv("FAIL_HOW") == "kill" {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	os.Exit(3)
	return nil
}

func launch(n int, child string, env ...string) *distributed.Launch {
	return &distributed.Launch{
		N: n, Backend: "ring", Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env:   append(os.Environ(), append([]string{"SPECULA_DISTRIBUTED_TEST_CHILD=" + child}, env...)...),
		Grace: 2 * time.Second,
	}
}

// Every rank gets its rank, the group size, the backend and a hostfile;
// only rank 0's output comes through.
func TestLaunchPrintsRankZero(t *testing.T) {
	l := launch(3, "echo")
	var stdout, stderr bytes.Buffer
	l.Stdout, l.Stderr = &stdout, &stderr
	if err := l.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := "rank 0 of 3, backend ring, hostfile set true\n"; stdout.String() != want {
		t.Errorf("stdout = %q, want %q", stdout.String(), want)
	}
	if want := "stderr of rank 0\n"; stderr.String() != want {
		t.Errorf("stderr = %q, want %q", stderr.String(), want)
	}
}

// A rank that fails ends the launch at once: the others are ended, and the
// error names the rank, how it ended and what it last wrote.
func TestLaunchEndsEveryRankWhenOneDies(t *testing.T) {
	cases := []struct {
		how      string
		rank     string
		wantDesc string
		wantCode int
	}{
		{"exit", "1", "exited with status 3", 3},
		{"kill", "2", "was killed by signal 9 (killed)", 128 + 9},
		{"exit", "0", "exited with status 3", 3},
	}
	for _, c := range cases {
		t.Run(c.how+" rank "+c.rank, func(t *testing.T) {
			l := launch(3, "fail", "FAIL_RANK="+c.rank, "FAIL_HOW="+c.how)
			start := time.Now()
			err := l.Run(context.Background())
			took := time.Since(start)
			var re *distributed.RankError
			if !errors.As(err, &re) {
				t.Fatalf("Run: %v, want a *RankError", err)
			}
			msg := err.Error()
			for _, want := range []string{"rank " + c.rank + " of 3 (pid ", c.wantDesc, "rank " + c.rank + " gives up: the fixture told it to"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q lacks %q", msg, want)
				}
			}
			if re.ExitCode() != c.wantCode {
				t.Errorf("ExitCode = %d, want %d", re.ExitCode(), c.wantCode)
			}
			// The others sleep a minute unless ended: SIGTERM ends them.
			if took > 30*time.Second {
				t.Errorf("Run took %v: the surviving ranks were not ended", took)
			}
		})
	}
}

// SIGTERM given to the launcher reaches every rank.
func TestLaunchForwardsSignals(t *testing.T) {
	l := launch(2, "fail", "FAIL_RANK=none")
	sigs := make(chan os.Signal, 1)
	l.Signals = sigs
	go func() {
		time.Sleep(500 * time.Millisecond)
		sigs <- syscall.SIGTERM
	}()
	start := time.Now()
	err := l.Run(context.Background())
	var re *distributed.RankError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "was killed by signal 15 (terminated)") {
		t.Fatalf("Run: %v, want a rank killed by signal 15", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Run took %v: the signal was not forwarded", took)
	}
}

// A cancelled context ends the ranks; Run reports the context's error.
func TestLaunchEndsRanksOnCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := launch(2, "fail", "FAIL_RANK=none").Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want context.DeadlineExceeded", err)
	}
}

// A program that does not exist is reported as rank 0 not starting.
func TestLaunchReportsAStartFailure(t *testing.T) {
	l := launch(2, "echo")
	l.Path = "/nonexistent/specula"
	err := l.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "rank 0 of 2 could not start") {
		t.Fatalf("Run: %v, want rank 0 not starting", err)
	}
}
