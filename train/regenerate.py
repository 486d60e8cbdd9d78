"""Stage 5: the target writes the drafts' training data.

The frozen bfloat16 target continues each prompt of prompts.npz (stage 3)
greedily: the training set (regenerated.npy) and, where stage 3 drew one, the
refining pass's own (regenerated-refine.npy). The drafts then learn the
target's own continuations — what verification will accept — rather than the
corpus. The evaluation sets (held-out packages, and code outside the corpus
where stage 3 had it) are continued the same way.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from transformers import Qwen3_5ForCausalLM

from common import id_dtype, log, preset, seed_everything, stage_parser


@torch.no_grad()
def continue_greedy(model, prompts: np.ndarray, new_tokens: int, batch: int, device: str) -> np.ndarray:
    """[N, prompt + new_tokens] ids: each prompt and the target's greedy continuation.
    Generation never stops early (no end token), so every row has the same length."""
    rows = []
    for i in range(0, len(prompts), batch):
        x = torch.from_numpy(prompts[i:i + batch]).to(device)
        out = model.generate(
            input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
            do_sample=False, eos_token_id=None, pad_token_id=model.config.pad_token_id,
        )
        rows.append(out.cpu().numpy().astype(id_dtype(model.config.vocab_size)))
        log(f"regenerate: {i + len(x)}/{len(prompts)} sequences")
    return np.concatenate(rows)


def load_target(folder: Path, device: str):
    model = Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16 if device != "cpu" else torch.float32)
    return model.to(device).eval()


def main() -> None:
    ap = stage_parser(__doc__)
    args = ap.parse_args()
    p = preset(args.preset, args.device)
    seed_everything(p.seed)
    prompts = np.load(args.work / "prompts.npz")
    model = load_target(args.work / "target", p.device)
    sets = {"regenerated": ("train", p.gen_len), "regenerated-refine": ("refine", p.gen_len),
            "eval": ("eval", p.eval_gen), "outside": ("outside", p.eval_gen)}
    for name, (key, new) in sets.items():
        if key not in prompts:
            continue
        start = time.monotonic()
        seqs = continue_greedy(model, prompts[key].astype(np.int64), new, p.regen_batch, p.device)
        np.save(args.work / f"{name}.npy", seqs)
        log(f"{name}: {seqs.shape[0]} x {seqs.shape[1]} tokens in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
