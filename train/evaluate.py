"""Stage 8: simulated acceptance of both drafts on held-out prompts.

The target continued held-out prompts greedily (eval.npy; outside.npy too:
code outside the corpus, reported under "outside"). A block is anchored
at every position of each continuation; its accepted length is 1 + the number
of leading rows that equal the target's next tokens — what greedy
verification accepts at depth bs-1. Their mean over positions is tau; a walk
through each continuation as greedy decoding would take it (each round
anchored where the last one ended) gives tau_walk, the tokens per round a
bench would see at full depth. Continuations that end in a loop are
reported apart, beside prompt lookup on the same positions (training.md §3).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

import draft_model as dm
import lookup
from common import log, preset, stage_parser, write_json
from draft import tap_features
from regenerate import load_target


def walk(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and rounds per sequence of greedy speculative decoding at full
    depth over the continuation: a round anchored at position a commits
    lengths[a] tokens and the next round is anchored at a + lengths[a].
    lengths is [sequences, anchors]."""
    tokens = np.zeros(len(lengths), np.int64)
    rounds = np.zeros(len(lengths), np.int64)
    for s, row in enumerate(lengths):
        a = 0
        while a < len(row):
            tokens[s] += row[a]
            rounds[s] += 1
            a += int(row[a])
    return tokens, rounds


def summarize(lengths: np.ndarray, looping_seq: np.ndarray) -> dict:
    """Mean accepted length over every anchor (tau: what each position would
    accept) and over the rounds a real decode runs (tau_walk: tokens per
    round; usually lower, as positions of short acceptance each take a round
    while long accepted blocks are skipped over). lengths is [sequences,
    anchors]."""
    looping = np.repeat(looping_seq, lengths.shape[1])
    flat = lengths.reshape(-1)
    tokens, rounds = walk(lengths)

    def mean(mask):
        return round(float(flat[mask].mean()), 3) if mask.any() else None

    def per_round(mask):
        return round(float(tokens[mask].sum() / rounds[mask].sum()), 3) if mask.any() else None

    every = np.ones(len(lengths), bool)
    return {"tau": mean(np.ones(len(flat), bool)), "tau_looping": mean(looping), "tau_non_looping": mean(~looping),
            "tau_walk": per_round(every), "tau_walk_looping": per_round(looping_seq),
            "tau_walk_non_looping": per_round(~looping_seq)}


def evaluate_set(p, path: Path, work: Path, target) -> dict:
    """Both drafts' and prompt lookup's simulated acceptance on one set of
    continuations (prompt_len prompt tokens, then the target's)."""
    seqs = np.load(path).astype(np.int64)
    embed, head = target.get_input_embeddings(), target.get_output_embeddings().weight
    T = seqs.shape[1]
    looping_seq = np.array([lookup.ends_in_loop(s[p.prompt_len:]) for s in seqs])
    anchors = np.arange(p.prompt_len - 1, T - 1)
    result = {"sequences": int(len(seqs)), "looping_sequences": int(looping_seq.sum()),
              "prompt_len": p.prompt_len, "continuation": T - p.prompt_len}
    depth = None
    for kind in ("dflash", "dflash2"):
        if not (work / kind / "config.json").exists():
            continue
        draft = dm.load_draft(work / kind).to(p.device).eval()
        depth = draft.block_size - 1
        feats = tap_features(target, seqs, draft.taps, p.device).float()
        tokens = torch.from_numpy(seqs).to(p.device)
        a = torch.from_numpy(np.tile(anchors, (len(seqs), 1))).to(p.device)
        lengths, per_pos = [], []
        for i in range(0, len(seqs), 8):
            with torch.autocast(device_type=p.device.split(":")[0], dtype=torch.bfloat16, enabled=p.device != "cpu"):
                pred = dm.block_predictions(draft, feats[i:i + 8], tokens[i:i + 8], a[i:i + 8], embed, head, True)
            labels, valid = dm.block_labels(tokens[i:i + 8], a[i:i + 8], draft.block_size)
            lengths.append(dm.accepted_lengths(pred, labels, valid).cpu().numpy())
            per_pos.append(((pred == labels) & valid)[..., 1:].cpu().numpy())
        lengths = np.concatenate(lengths).reshape(len(seqs), len(anchors))
        hits = np.concatenate(per_pos).reshape(-1, draft.block_size - 1)
        result[kind] = summarize(lengths, looping_seq)
        result[kind]["row_accuracy"] = [round(float(x), 3) for x in hits.mean(0)]
        log(f"evaluate {path.stem} {kind}: {result[kind]}")
    if depth:
        lk = lookup.lookup_acceptance(seqs, p.prompt_len, depth)[:, :len(anchors)]
        result["prompt_lookup"] = summarize(lk, looping_seq)
        log(f"evaluate {path.stem} prompt lookup: {result['prompt_lookup']}")
    return result


def main() -> None:
    ap = stage_parser(__doc__)
    args = ap.parse_args()
    p = preset(args.preset, args.device)
    target = load_target(args.work / "target", p.device)
    result = evaluate_set(p, args.work / "eval.npy", args.work, target)
    if (args.work / "outside.npy").exists():
        result["outside"] = evaluate_set(p, args.work / "outside.npy", args.work, target)
    write_json(args.work / "eval.json", result)


if __name__ == "__main__":
    main()
