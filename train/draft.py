"""Stages 6 and 7: train a DFlash or DFlash2 draft against the frozen target.

The data are the target's own greedy continuations (regenerated.npy). The
target's tap features for every sequence are computed once and kept on the
device; each step draws a batch of sequences and `anchors` random positions in
each sequence's continuation, and trains every block at once with the
published mask and position-decayed loss (draft_model.py).

DFlash2 starts from the trained DFlash draft's backbone (its convolutions
start as the identity, so it starts out computing exactly what DFlash does)
and adds the candidate selector's loss. Its refining pass (--refine) trains the
whole DFlash2 draft once more from where that left it, with a fresh optimiser
and a second, lower learning-rate schedule (a warm restart), on continuations
of other prompts (regenerated-refine.npy) when stage 3 drew them.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

import draft_model as dm
from common import MASK, Preset, log, preset, read_json, seed_everything, stage_parser, write_json
from regenerate import load_target


@torch.no_grad()
def tap_features(target, seqs: np.ndarray, taps: list[int], device: str, batch: int = 512) -> torch.Tensor:
    """[N, T, nTaps·H] bfloat16: the residual stream after each tap layer
    (hidden_states[i + 1]), concatenated in tap order."""
    out = None  # filled in place: a list joined at the end would need twice the memory
    for i in range(0, len(seqs), batch):
        x = torch.from_numpy(seqs[i:i + batch].astype(np.int64)).to(device)
        hs = target(input_ids=x, output_hidden_states=True).hidden_states
        if out is None:
            out = torch.empty((len(seqs), seqs.shape[1], hs[0].shape[-1] * len(taps)), dtype=torch.bfloat16,
                              device=device)
        out[i:i + len(x)] = torch.cat([hs[t + 1] for t in taps], -1)
    return out


def mask_token_id(path: Path) -> int:
    """The id of the tokenizer's mask token, which fills a block's rows after
    its anchor: the added token <|mask|> (train/bpe.py reserves it)."""
    ids = [t["id"] for t in read_json(path).get("added_tokens", []) if t.get("content") == MASK]
    if not ids:
        raise SystemExit(f"{path}: no added token {MASK!r} for the drafts' mask rows; add one (an unused "
                         f"id below the target's vocab_size, as the published Qwen3.5 drafts use a reserved "
                         f"token) or use a tokenizer made by train/bpe.py")
    return ids[0]


def sample_anchors(rng: np.random.Generator, rows: int, count: int, lo: int, hi: int) -> np.ndarray:
    """Sorted distinct anchors in [lo, hi] for each row."""
    span = hi - lo + 1
    count = min(count, span)
    return np.sort(np.stack([rng.choice(span, size=count, replace=False) + lo for _ in range(rows)]), axis=1)


def lr_at(step: int, total: int, peak: float) -> float:
    warm = max(1, int(0.04 * total))
    if step < warm:
        return peak * (step + 1) / warm
    t = min(1.0, (step - warm) / max(1, total - warm))
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t)))


def train(p: Preset, work: Path, kind: str, refine: bool = False) -> dict:
    if refine and kind != "dflash2":
        raise SystemExit("draft: --refine is a DFlash2 pass (it starts from WORK/dflash2)")
    seed_everything(p.seed + (2 if kind == "dflash2" else 3) + (10 if refine else 0))
    name = "dflash2-refine" if refine else kind
    dev = p.device
    target = load_target(work / "target", dev)
    for t in target.parameters():
        t.requires_grad_(False)
    tcfg = read_json(work / "target" / "config.json")
    mask_id = mask_token_id(work / "tokenizer" / "tokenizer.json")
    cfg = dm.make_draft_config(tcfg, kind, num_layers=p.draft_layers, block_size=p.block_size, mask_token_id=mask_id,
                               intermediate_size=p.draft_intermediate, selector_rank=p.selector_rank, top_k=p.top_k,
                               taps=list(p.draft_taps) if p.draft_taps else None)
    draft = dm.DraftModel(cfg)
    if refine:
        draft.load_state_dict(dm.load_draft(work / "dflash2").state_dict())
        log("dflash2 refine: from the trained DFlash2 draft")
    elif kind == "dflash2":
        backbone = dm.load_draft(work / "dflash")
        missing, unexpected = draft.load_state_dict(backbone.state_dict(), strict=False)
        if unexpected or any("conv" not in m and "candidate_selector" not in m for m in missing):
            raise SystemExit(f"dflash2 warm start: backbone does not fit (missing {missing}, unexpected {unexpected})")
        log("dflash2: backbone from the trained DFlash draft")
    draft = draft.to(dev).float().train()
    params = dm.count_parameters(draft)
    log(f"{kind}: {params:,} parameters, taps {draft.taps}, block {draft.block_size}")

    data = work / "regenerated.npy"
    if refine and (work / "regenerated-refine.npy").exists():
        data = work / "regenerated-refine.npy"
    seqs = np.load(data)
    log(f"{kind}: {len(seqs)} sequences from {data.name}")
    start = time.monotonic()
    feats = tap_features(target, seqs, draft.taps, dev)
    tokens = torch.from_numpy(seqs.astype(np.int64)).to(dev)
    log(f"{kind}: tap features of {len(seqs)} sequences in {time.monotonic() - start:.1f} s")
    embed = target.get_input_embeddings()
    head = target.get_output_embeddings().weight
    weights = dm.position_weights(draft.block_size, dev)
    peak = p.dflash2_refine_lr if refine else p.draft_lr
    budget = p.dflash2_refine_seconds if refine else p.dflash2_seconds if kind == "dflash2" else p.draft_seconds
    opt = torch.optim.AdamW([t for t in draft.parameters() if t.requires_grad], lr=peak,
                            betas=(0.9, 0.95), weight_decay=0.01, fused=dev.startswith("cuda"))
    rng = np.random.default_rng(p.seed + (17 if refine else 7))
    T = seqs.shape[1]
    lo, hi = p.prompt_len - 1, T - 2
    total = p.draft_steps
    start = time.monotonic()
    t10 = None
    history = []
    step = 0
    while step < total:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, peak)
        rows = torch.from_numpy(rng.integers(0, len(seqs), size=p.draft_batch)).to(dev)
        anchors = torch.from_numpy(sample_anchors(rng, p.draft_batch, p.anchors, lo, hi)).to(dev)
        tok = tokens[rows]
        blocks = dm.make_blocks(tok, anchors, draft.block_size, draft.mask_token_id)
        labels, valid = dm.block_labels(tok, anchors, draft.block_size)
        with torch.autocast(device_type=dev.split(":")[0], dtype=torch.bfloat16, enabled=dev != "cpu"):
            hidden = draft(feats[rows].float(), blocks, anchors, embed)
            logits = dm.unembed(hidden, head)
        loss, acc = dm.dflash_loss(logits, labels, valid, weights)
        total_loss = loss
        recall = None
        if kind == "dflash2":
            sel, recall = dm.selector_loss(draft, hidden.float(), logits.float(), labels, valid, blocks, weights)
            total_loss = loss + p.selector_weight * sel
        opt.zero_grad(set_to_none=True)
        total_loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 10:
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            t10 = time.monotonic()
        # The step count that fills the time budget, estimated from the rate so
        # far: first after 30 steps (the schedule needs a total), then again every
        # 500, since the first steps run faster than the rest (a DFlash run
        # estimated at 240 s once took 300).
        if t10 is not None and (step == 30 or step % 500 == 0):
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            rate = (step - 10) / (time.monotonic() - t10)
            total = min(p.draft_steps, max(step, step + int((budget - (time.monotonic() - start)) * rate)))
            if step == 30:
                log(f"{name}: {rate:.1f} steps/s: {total} steps")
        if step % 500 == 0 or step == total:
            rec = {"step": step, "loss": round(loss.item(), 4), "acc": [round(a, 3) for a in acc[1:].tolist()]}
            if recall is not None:
                rec["selector_loss"] = round(sel.item(), 4)
                rec["recall"] = round(recall.item(), 4)
            history.append(rec)
            log(f"{name} {rec}")
    seconds = time.monotonic() - start
    dm.save_draft(draft, work / kind)
    record = {"kind": kind, "parameters": params, "steps": step, "seconds": round(seconds, 1),
              "batch": p.draft_batch, "anchors_per_sequence": p.anchors, "lr": peak,
              "sequences": int(len(seqs)), "history": history,
              "warm_start": "dflash2" if refine else "dflash" if kind == "dflash2" else None}
    write_json(work / f"{name}-train.json", record)
    return record


def main() -> None:
    ap = stage_parser(__doc__)
    ap.add_argument("--kind", choices=("dflash", "dflash2"), required=True)
    ap.add_argument("--refine", action="store_true", help="DFlash2's second pass, from WORK/dflash2")
    args = ap.parse_args()
    train(preset(args.preset, args.device), args.work, args.kind, args.refine)


if __name__ == "__main__":
    main()
