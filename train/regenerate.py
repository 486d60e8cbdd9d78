"""Stage 4: the target writes the drafts' training data.

Prompts are windows of the corpus that contain no document boundary; the
frozen bfloat16 target continues each one greedily. The drafts then learn the
target's own continuations — what verification will accept — rather than the
corpus. The same function makes the evaluation set from held-out prompts.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import Qwen3_5ForCausalLM

import data
from common import EOT, log, preset, seed_everything


def prompt_starts(stream: np.ndarray, eot: int, count: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """`count` distinct window starts whose windows hold no <|endoftext|>."""
    boundary = np.concatenate([[0], np.cumsum(stream == eot)])
    starts = []
    seen = set()
    while len(starts) < count:
        for s in rng.integers(0, len(stream) - length, size=count * 2):
            if s in seen or boundary[s + length] != boundary[s]:
                continue
            seen.add(s)
            starts.append(s)
            if len(starts) == count:
                break
    return np.sort(np.asarray(starts, dtype=np.int64))


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
        rows.append(out.cpu().numpy().astype(np.uint16))
        log(f"regenerate: {i + len(x)}/{len(prompts)} sequences")
    return np.concatenate(rows)


def load_target(folder: Path, device: str):
    model = Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16 if device != "cpu" else torch.float32)
    return model.to(device).eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="full")
    ap.add_argument("--device")
    ap.add_argument("--work", type=Path, required=True)
    args = ap.parse_args()
    p = preset(args.preset, args.device)
    seed_everything(p.seed)
    tok = Tokenizer.from_file(str(args.work / "tokenizer" / "tokenizer.json"))
    eot = tok.token_to_id(EOT)
    streams = data.streams(args.work / "tokenizer", args.work / "corpus", args.work / "tokens")
    model = load_target(args.work / "target", p.device)
    rng = np.random.default_rng(p.seed + 1)
    sets = {
        "regenerated": ("train", p.regen_sequences, p.gen_len),
        "eval": ("heldout", p.eval_prompts, p.eval_gen),
    }
    for name, (split, count, new) in sets.items():
        start = time.monotonic()
        starts = prompt_starts(streams[split], eot, count, p.prompt_len, rng)
        prompts = data.windows(streams[split], starts, p.prompt_len)
        seqs = continue_greedy(model, prompts, new, p.regen_batch, p.device)
        np.save(args.work / f"{name}.npy", seqs)
        log(f"{name}: {seqs.shape[0]} x {seqs.shape[1]} tokens in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
