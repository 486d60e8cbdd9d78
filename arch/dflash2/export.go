package dflash2

import (
	"fmt"

	"github.com/specula-dev/specula/arch/dflash"
	"github.com/specula-dev/specula/loader"
	"github.com/specula-dev/specula/mlx"
)

// ExportMLX returns the draft's tensors in MLX's layout as mlx-vlm's
// DFlash2 drafter names them: DFlash's (dflash.Draft.ExportMLX), the
// selector's codebooks as embeddings (".weight" added), and as quantizable
// layers also every kernel projection, the selector's hidden projection and
// its codebooks.
func (d *Draft) ExportMLX(tensors map[string]*mlx.Array) (*loader.MLXModel, error) {
	linear := dflash.LinearLayers(&d.cfg.Config)
	for l := range d.cfg.NumLayers {
		for _, c := range []string{"attention_conv", "mlp_conv"} {
			linear = append(linear, fmt.Sprintf("layers.%d.%s.kernel_projection", l, c))
		}
	}
	linear = append(linear, selectorPrefix+"hidden_projection", codebooks[0], codebooks[1])
	m, err := dflash.ExportTensors(tensors, WeightSpec(d.cfg), linear)
	if err != nil {
		return nil, err
	}
	for _, cb := range codebooks {
		if a, ok := m.Tensors[cb]; ok {
			delete(m.Tensors, cb)
			m.Tensors[cb+".weight"] = a
		}
	}
	return m, nil
}
