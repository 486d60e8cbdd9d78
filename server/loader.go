package server

import (
	"context"

	"github.com/specula-dev/specula/engine"
)

// DefaultPromptCacheBytes bounds each model's prompt-cache checkpoints
// (engine.Options.PromptCacheBytes): a Qwen3.5-4B checkpoint (its recurrent
// state) takes about 50 MiB, so 1 GiB keeps every checkpoint a few chats
// need.
const DefaultPromptCacheBytes = 1 << 30

// EngineLoader loads models with engine.Load and a prompt cache of
// promptCacheBytes (0: none). opts carries the rest (plugin launcher,
// logger); its PromptCacheBytes is replaced.
func EngineLoader(promptCacheBytes int64, opts *engine.Options) Loader {
	return func(ctx context.Context, manifest string) (Generator, error) {
		var o engine.Options
		if opts != nil {
			o = *opts
		}
		o.PromptCacheBytes = promptCacheBytes
		e, err := engine.Load(ctx, manifest, o)
		if err != nil {
			return nil, err
		}
		return e, nil
	}
}
