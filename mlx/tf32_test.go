package mlx_test

import (
	"os"
	"os/exec"
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
		env := []string{"SPECULA_TF32_CHILD=1"}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "MLX_ENABLE_TF32=") {
				env = append(env, kv)
			}
		}
		if c.set != "" {
			env = append(env, c.set)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestTF32OffUnlessSet$")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child (%q): %v\n%s", c.set, err, out)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("child with %q set saw %q, want %s", c.set, out, c.want)
		}
	}
}
