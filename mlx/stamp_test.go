package mlx_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// The unity file must carry the digest of the shim sources; otherwise Go's
// build cache can link a stale shim (see scripts/shim-stamp.sh).
func TestShimStampIsCurrent(t *testing.T) {
	var src []byte
	for _, f := range []string{"shim/shim.h", "shim/shim.cpp", "shim/compile.cpp", "shim/blas.cpp", "shim/system.cpp", "shim/gdn.cpp", "shim/norm.cpp", "shim/rope.cpp", "shim/act.cpp", "shim/dist.cpp", "shim/topk.cpp", "shim/part.cpp"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	sum := sha256.Sum256(src)
	want := "// shim digest: " + hex.EncodeToString(sum[:])[:32]
	unity, err := os.ReadFile("shim_unity.cpp")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unity), want+"\n") {
		t.Fatalf("mlx/shim_unity.cpp lacks %q: run scripts/shim-stamp.sh (make does)", want)
	}
}
