package loader

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/specula-dev/specula/mlx"
)

// LayerGroup is a set of layers whose module paths differ only in their
// layer index ("language_model.model.layers.*.mlp.down_proj"), with how they
// are stored.
type LayerGroup struct {
	Pattern string `json:"pattern"`
	Count   int    `json:"count"`
	// Storage is "dense <dtype>" or the quantization ("affine 4-bit, group
	// 64"); a group whose layers differ lists every storage, joined by "; ".
	Storage string `json:"storage"`
}

// Layout is how a checkpoint stores its weights, from the headers alone.
type Layout struct {
	// Format is "mlx" when the safetensors metadata says so (files written
	// by mlx-lm, mlx-vlm or specula quantize), else "".
	Format string `json:"format,omitempty"`
	// Quantization summarises config.json's quantization section; "" when
	// there is none.
	Quantization string `json:"quantization,omitempty"`
	// Groups are the two-dimensional weights (linear layers and embeddings)
	// by name pattern, in name order.
	Groups []LayerGroup `json:"groups"`
}

var layerIndex = regexp.MustCompile(`\.\d+\.`)

// Layout describes the checkpoint's storage without reading tensor data: the
// metadata format, the quantization section, and for every group of
// two-dimensional weights whether it is dense (and in which dtype) or
// quantized (a <layer>.scales beside a packed weight) and how. The
// quantization of a layer is config.json's for it when the stored shapes
// agree; otherwise the product bits × group size the shapes imply is shown.
func (c *Checkpoint) Layout() (*Layout, error) {
	l := &Layout{}
	for _, s := range c.shards {
		if f := s.Metadata()["format"]; f != "" {
			l.Format = f
		}
	}
	var quant *Quantization
	if c.Config != nil {
		q, err := ParseQuantization(c.Config.Path, c.Config.Raw)
		if err != nil {
			return nil, err
		}
		quant = q
		if q != nil {
			l.Quantization = q.Summary()
		}
	}
	type acc struct {
		count   int
		storage []string
	}
	groups := map[string]*acc{}
	for _, t := range c.tensors {
		path, ok := strings.CutSuffix(t.Name, ".weight")
		if !ok || len(t.Shape) != 2 {
			continue
		}
		storage := "dense " + t.DType.String()
		if s, ok := c.Tensor(path + ".scales"); ok && len(s.Shape) == 2 {
			storage = quantStorage(path, t, s, quant)
		}
		pattern := layerIndex.ReplaceAllString(path, ".*.")
		g := groups[pattern]
		if g == nil {
			g = &acc{}
			groups[pattern] = g
		}
		g.count++
		if !slices.Contains(g.storage, storage) {
			g.storage = append(g.storage, storage)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(groups)) {
		l.Groups = append(l.Groups, LayerGroup{Pattern: p, Count: groups[p].count, Storage: strings.Join(groups[p].storage, "; ")})
	}
	return l, nil
}

// quantStorage names a quantized layer's storage from its packed weight w
// and scales s.
func quantStorage(path string, w, s TensorInfo, quant *Quantization) string {
	packed, groups := int(w.Shape[1]), int(s.Shape[1])
	if quant != nil {
		q := quant.For(path)
		if !q.IsZero() && groups > 0 {
			in := q.InputDim(packed)
			if p, ok := q.PackedDim(in); ok && p == packed && in/q.GroupSize == groups {
				return q.String()
			}
		}
	}
	if groups == 0 {
		return "quantized (no scale columns)"
	}
	mode := mlx.Affine
	if s.DType == U8 {
		mode = "fp (uint8 scales)"
	}
	return fmt.Sprintf("%s, bits × group = %d (config.json does not describe it)", mode, packed*32/groups)
}
