// Package all registers every built-in architecture: programs blank-import it
// (import _ "github.com/specula-dev/specula/arch/all") to get them all in the
// registry with one line.
package all

import (
	_ "github.com/specula-dev/specula/arch/qwen35" // Qwen3.5 target
)
