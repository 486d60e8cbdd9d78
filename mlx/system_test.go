package mlx_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/specula-dev/specula/mlx"
)

// envSigProbe makes the test binary, re-executed by TestCompilerRunsKeepSIGINT,
// run the probe instead.
const envSigProbe = "SPECULA_TEST_SIGINT_PROBE"

// TestCompilerRunsKeepSIGINT: while MLX runs the compiler (g++ --version
// through system(), then the kernel builds), the process never ignores
// SIGINT — the C library's system() would, dropping a Ctrl-C (the shim's
// system.cpp replaces it). A fresh process with an empty kernel folder
// evaluates a compiled function while a goroutine samples the process's
// ignored-signal mask (Linux /proc) and its children; its g++ sleeps a
// little first, so that the sampling cannot miss a compiler run.
func TestCompilerRunsKeepSIGINT(t *testing.T) {
	if os.Getenv(envSigProbe) == "1" {
		sigintProbe()
		return
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs Linux /proc to read the ignored-signal mask")
	}
	if !fusionExpected() || !onCPU() {
		t.Skip("MLX runs no compiler here (GPU, SPECULA_COMPILE=0, or no g++)")
	}
	// A g++ that takes its time, so that the sampling cannot miss a run.
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Fatal(err)
	}
	slow := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\nsleep 0.2\nexec %s \"$@\"\n", gxx)
	if err := os.WriteFile(filepath.Join(slow, "g++"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCompilerRunsKeepSIGINT$")
	cmd.Env = append(os.Environ(), envSigProbe+"=1", "TMPDIR="+t.TempDir(), "PATH="+slow+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	var ignored, children int
	if _, err := fmt.Sscanf(lastLine(string(out), "probe:"), "probe: sigint-ignored=%d children=%d", &ignored, &children); err != nil {
		t.Fatalf("probe printed %q: %v", out, err)
	}
	if children == 0 {
		t.Fatalf("the probe saw no compiler run (the test proves nothing):\n%s", out)
	}
	if ignored > 0 {
		t.Fatalf("SIGINT was ignored in %d samples while MLX ran the compiler: a Ctrl-C then is lost", ignored)
	}
}

// lastLine is the last line of s that starts with prefix, or "".
func lastLine(s, prefix string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], prefix) {
			return lines[i]
		}
	}
	return ""
}

// sigintProbe samples SigIgn and the children of every thread until a first
// compiled evaluation ends, and prints the counts.
func sigintProbe() {
	// Handle SIGINT as specula does (it may have been started ignored, as
	// background jobs of scripts are).
	signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	stop := make(chan struct{})
	counts := make(chan [2]int)
	go func() {
		var ignored, children int
		for {
			select {
			case <-stop:
				counts <- [2]int{ignored, children}
				return
			default:
			}
			if sigIgnored(2) {
				ignored++
			}
			kids, _ := filepath.Glob("/proc/self/task/*/children")
			for _, k := range kids {
				if b, _ := os.ReadFile(k); len(strings.TrimSpace(string(b))) > 0 {
					children++
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	f := mlx.Compile("sigint_probe", 1, func(in []*mlx.Array) []*mlx.Array {
		return []*mlx.Array{mlx.Exp(mlx.Multiply(in[0], mlx.Sigmoid(in[0])))}
	})
	err := mlx.Do(context.Background(), func() error { return mlx.Eval(f.Call(mlx.Ones(mlx.Float32, 4))...) })
	close(stop)
	c := <-counts
	if err != nil {
		fmt.Println("probe error:", err)
	}
	fmt.Printf("probe: sigint-ignored=%d children=%d\n", c[0], c[1])
}

// sigIgnored reports whether signal sig is in this process's ignored set.
func sigIgnored(sig uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(sig-1)) != 0
		}
	}
	return false
}
