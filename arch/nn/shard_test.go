package nn_test

import (
	"strings"
	"testing"

	"github.com/specula-dev/specula/arch/nn"
	"github.com/specula-dev/specula/mlx"
	"github.com/specula-dev/specula/mlx/mlxtest"
)

// A row cut computes the full product's output columns of its spans; the
// column cuts of a partition add up to the full product (the bias kept by
// one of them). The reference is the uncut layer.
func TestRowsAndColsReproduceTheFullProduct(t *testing.T) {
	// On the CPU: MLX's CUDA quantized product takes no [3, 64] · [16, 64]ᵀ
	// in groups of 32 ("No implementation for problem shape"), and the cuts,
	// not the GPU's kernels, are what this checks.
	mlxtest.RunOnCPU(t, func(t *mlxtest.T) {
		x := randMatrix(11, 3, 128)
		bias := mlx.Reshape(randMatrix(12, 1, 16), 16)
		q4, _ := quantized(randMatrix(13, 16, 128), mlx.Quant{Mode: mlx.Affine, Bits: 4, GroupSize: 32})
		q4.Bias = bias
		for _, c := range []struct {
			name string
			l    *nn.Linear
		}{
			{"dense", nn.Dense(randMatrix(14, 16, 128), bias)},
			{"affine 4-bit", q4},
		} {
			full := c.l.Forward(x)

			rows, err := c.l.Rows(nil, nn.Span{Start: 2, Stop: 5}, nn.Span{Start: 10, Stop: 16})
			t.NoErr(err)
			want := mlx.Concatenate(-1, mlx.SliceAxis(full, -1, 2, 5), mlx.SliceAxis(full, -1, 10, 16))
			if d := maxAbsDiff(t, rows.Forward(x), want); d > 1e-5 {
				t.Errorf("%s: Rows differs from the full product's columns by %g", c.name, d)
			}

			var sum *mlx.Array
			for i, s := range []nn.Span{{Start: 0, Stop: 32}, {Start: 32, Stop: 96}, {Start: 96, Stop: 128}} {
				part, err := c.l.Cols(nil, s, i == 0)
				t.NoErr(err)
				y := part.Forward(mlx.SliceAxis(x, -1, s.Start, s.Stop))
				if sum == nil {
					sum = y
				} else {
					sum = mlx.Add(sum, y)
				}
			}
			if d := maxAbsDiff(t, sum, full); d > 1e-4 {
				t.Errorf("%s: the column cuts add up to the full product ± %g", c.name, d)
			}
		}

		// A quantized cut inside a group is refused, naming the groups.
		if _, err := q4.Cols(nil, nn.Span{Start: 0, Stop: 48}, false); err == nil || !strings.Contains(err.Error(), "groups of 32") {
			t.Errorf("Cols across a group: %v, want an error naming the groups of 32", err)
		}
	})
}

// Cut gathers the spans' entries in order.
func TestCut(t *testing.T) {
	mlxtest.Run(t, func(t *mlxtest.T) {
		w := mlx.FromFloat32s([]float32{0, 1, 2, 3, 4, 5, 6, 7}, 4, 2)
		got := nn.Cut(w, 0, nn.Span{Start: 1, Stop: 2}, nn.Span{Start: 3, Stop: 4})
		t.NoErr(mlx.Eval(got))
		if v := t.Float32s(got); len(v) != 4 || v[0] != 2 || v[1] != 3 || v[2] != 6 || v[3] != 7 {
			t.Fatalf("rows 1 and 3 of [[0 1] [2 3] [4 5] [6 7]] = %v", v)
		}
	})
}
