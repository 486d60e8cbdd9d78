package model

import "github.com/specula-dev/specula/mlx"

// WeightHolder is implemented by models and drafts that report the arrays
// they hold after LoadWeights (pinned by them). The engine evaluates them in
// groups to read the checkpoint with progress, and sums their sizes for
// memory accounting.
type WeightHolder interface {
	Weights() []*mlx.Array
}
