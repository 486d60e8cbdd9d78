"""Stage 10: parity fixtures of the shipped family for specula's Go forward.

Runs the training code's own forward (transformers' Qwen3.5 for the target,
draft_model.py for the drafts) in float32 on the CPU over the exported family
and writes what the Go test (models/go-tiny/parity_test.go) compares:

- the prompt's ids as the family's tokenizer encodes them;
- the target's logits at the last 4 prompt positions and its tap features
  (the output of each tapped layer, concatenated) at the same positions;
- for one block anchored right after the prompt (the anchor is the target's
  greedy next token, the context every prompt position): the DFlash and the
  DFlash2 draft logits of rows 1..7, and DFlash2's greedy selector path.

Logits rows are stored compactly: the ids of each row's 64 largest logits,
their values, and the row's logsumexp (which sees every entry). Everything
fits in a few hundred kB.

    python train/parity.py --family models/go-tiny --out testdata/fixtures/go-tiny
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

import draft_model as dm
from regenerate import load_target

PROMPT = '''// Package ring implements a fixed-size ring buffer of bytes.
package ring

import "errors"

// ErrFull is returned by Write when the buffer has no room left.
var ErrFull = errors.New("ring: buffer full")

// Buffer is a ring buffer. The zero value is not usable; call New.
type Buffer struct {
	data       []byte
	start, len int
}

// Len returns the number of unread bytes in the buffer.
func (b *Buffer) Len() int {
'''
TOP = 64
ROWS = 4


def compact(logits: torch.Tensor) -> dict[str, np.ndarray]:
    """[R, V] -> top ids [R, TOP] (descending, ties to the lower id), values, logsumexp [R]."""
    vals, ids = dm.sorted_top_k(logits, TOP)
    return {"ids": ids.to(torch.int32).numpy(), "values": vals.numpy().astype(np.float32),
            "logsumexp": torch.logsumexp(logits.double(), -1).float().numpy()}


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="full", help="unused; accepted like every stage's")
    ap.add_argument("--family", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from tokenizers import Tokenizer
    import transformers

    torch.manual_seed(0)
    tok = Tokenizer.from_file(str(args.family / "tokenizer.json"))
    ids = tok.encode(PROMPT).ids
    target = load_target(args.family, "cpu")  # float32
    x = torch.tensor([ids])
    out = target(x, output_hidden_states=True)
    logits = out.logits[0].float()
    anchor = int(logits[-1].argmax())
    tensors: dict[str, np.ndarray] = {}
    for k, v in compact(logits[-ROWS:]).items():
        tensors[f"target_logits_{k}"] = v
    embed, head = target.get_input_embeddings(), target.get_output_embeddings().weight
    record = {"prompt": PROMPT, "prompt_ids": ids, "anchor": anchor, "rows": ROWS, "top": TOP,
              "torch": torch.__version__, "transformers": transformers.__version__,
              "python": platform.python_version(), "dtype": "float32 (weights bfloat16, cast)"}
    for kind in ("dflash", "dflash2"):
        draft = dm.load_draft(args.family / kind).eval()
        feats = torch.cat([out.hidden_states[t + 1] for t in draft.taps], -1).float()  # [1, T, F]
        if kind == "dflash":
            tensors["taps"] = feats[0, -ROWS:].numpy()
            record["taps"] = list(draft.taps)
        T = feats.shape[1]
        block = torch.full((1, 1, draft.block_size), draft.mask_token_id, dtype=torch.long)
        block[..., 0] = anchor
        hidden = draft(feats, block, torch.tensor([[T]]), embed)[0, 0]  # [bs, H]
        rows = hidden[1:]
        draft_logits = dm.unembed(rows, head).float()
        for k, v in compact(draft_logits).items():
            tensors[f"{kind}_logits_{k}"] = v
        record[f"{kind}_argmax"] = draft_logits.argmax(-1).tolist()
        if kind == "dflash2":
            path, _, _, _ = dm.select_path(draft, rows, draft_logits, anchor)
            record["dflash2_selector_path"] = path.tolist()
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out / "reference.safetensors"))
    (args.out / "reference.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"parity: {len(ids)} prompt tokens, anchor {anchor}, files in {args.out}")


if __name__ == "__main__":
    main()
