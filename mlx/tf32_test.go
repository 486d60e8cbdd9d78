package mlx_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	_ "github.com/specula-dev/specula/mlx"
)

// A process that imports mlx with MLX_ENABLE_TF32 unset sees it as "0" (the
// child below reports what it sees); one that set it keeps its value.
func TestTF32OffUnlessSet(t *testing.T) {
	if os.Getenv("SPECULA_TF32_CHILD") == "1" {
		os.Stdout.WriteString("tf32=" + os.Getenv("MLX_ENABLE_TF32") + "\n")
		return
	}
	for _, c := range []struct{ set, want string }{{"", "tf32=0"}, {"MLX_ENABLE_TF32=1", "tf32=1"}} {
		out, err := runChild("TestTF32OffUnlessSet", []string{"MLX_ENABLE_TF32", "SPECULA_TF32_CHILD"}, "SPECULA_TF32_CHILD=1", c.set)
		if err != nil {
			t.Fatalf("child (%q): %v\n%s", c.set, err, out)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("child with %q set saw %q, want %s", c.set, out, c.want)
		}
	}
}

// runChild runs this test binary's test name in a child process whose
// environment is this one without the variables in drop, plus the settings
// in set ("KEY=value"; empty ones skipped), and returns its output.
func runChild(name string, drop []string, set ...string) ([]byte, error) {
	var env []string
	for _, kv := range os.Environ() {
		if !slices.Contains(drop, strings.SplitN(kv, "=", 2)[0]) {
			env = append(env, kv)
		}
	}
	for _, kv := range set {
		if kv != "" {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$")
	cmd.Env = env
	return cmd.CombinedOutput()
}
