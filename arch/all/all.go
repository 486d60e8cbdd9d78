// Package all registers every built-in architecture: programs blank-import it
// (import _ "github.com/specula-dev/specula/arch/all") to get them all in the
// registry with one line.
package all

import (
	_ "github.com/specula-dev/specula/arch/dflash"    // DFlash block-diffusion draft
	_ "github.com/specula-dev/specula/arch/dflash2"   // DFlash2 draft with candidate selector
	_ "github.com/specula-dev/specula/arch/qwen35"    // Qwen3.5 target
	_ "github.com/specula-dev/specula/arch/qwen35moe" // Qwen3.5 MoE target
)
