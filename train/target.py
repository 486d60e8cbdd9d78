"""Stage 4: train the target, a Qwen3.5 text model (Qwen3_5ForCausalLM).

The checkpoint is written by transformers' save_pretrained in bfloat16 —
exactly the layout of a published Qwen3.5 text checkpoint — and the drafts
are trained against those bfloat16 weights, i.e. against the shipped target.

Schedule: linear warm-up, then cosine decay to a tenth of the peak rate over
the steps that give `target_tokens`. The step rate is measured over steps
10-30; if the budget `target_seconds` cannot fit the tokens, the run says so
and shortens the schedule to the time budget.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

import data
from common import EOT, Preset, log, preset, seed_everything, stage_parser, write_json


def make_config(p: Preset, tok: Tokenizer) -> Qwen3_5TextConfig:
    eot = tok.token_to_id(EOT)
    per_group = ["linear_attention"] * 3 + ["full_attention"]
    if p.layers % 4:
        raise SystemExit(f"preset {p.name}: layers must be a multiple of 4 (3 delta-net : 1 attention), got {p.layers}")
    return Qwen3_5TextConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=p.hidden,
        intermediate_size=p.intermediate,
        num_hidden_layers=p.layers,
        layer_types=per_group * (p.layers // 4),
        num_attention_heads=p.heads,
        num_key_value_heads=p.kv_heads,
        head_dim=p.head_dim,
        linear_num_key_heads=p.linear_key_heads,
        linear_num_value_heads=p.linear_value_heads,
        linear_key_head_dim=p.linear_head_dim,
        linear_value_head_dim=p.linear_head_dim,
        linear_conv_kernel_dim=4,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eot,
        pad_token_id=eot,
    )


def lr_at(step: int, total: int, p: Preset) -> float:
    if step < p.warmup_steps:
        return p.lr * (step + 1) / p.warmup_steps
    t = min(1.0, (step - p.warmup_steps) / max(1, total - p.warmup_steps))
    return p.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


@torch.no_grad()
def heldout_loss(model, stream: np.ndarray, seq_len: int, device: str, windows: int = 128) -> float:
    """Mean next-token loss (nats/token) over evenly spaced held-out windows."""
    model.eval()
    starts = np.linspace(0, len(stream) - seq_len - 2, windows).astype(np.int64)
    total, count = 0.0, 0
    for chunk in np.array_split(starts, max(1, windows // 32)):
        x = torch.from_numpy(data.windows(stream, chunk, seq_len + 1)).to(device)
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=device != "cpu"):
            logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        total += loss.item()
        count += x[:, 1:].numel()
    model.train()
    return total / count


def train(p: Preset, tok_dir: Path, streams: dict, out: Path) -> dict:
    seed_everything(p.seed)
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    cfg = make_config(p, tok)
    model = Qwen3_5ForCausalLM(cfg).to(p.device)
    params = sum(t.numel() for t in model.parameters())
    log(f"target: {params:,} parameters, {p.layers} layers, hidden {p.hidden}")
    decay = [t for n, t in model.named_parameters() if t.ndim >= 2 and "embed" not in n]
    other = [t for n, t in model.named_parameters() if not (t.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": p.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=p.lr, betas=(0.9, 0.95), fused=p.device.startswith("cuda"),
    )
    train_stream = streams["train"]
    per_step = p.batch * p.seq_len
    total = math.ceil(p.target_tokens / per_step)
    rng = np.random.default_rng(p.seed)
    start = time.monotonic()
    t10 = None
    losses = []
    step = 0
    while step < total:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, p)
        starts = rng.integers(0, len(train_stream) - p.seq_len - 1, size=p.batch)
        x = torch.from_numpy(data.windows(train_stream, starts, p.seq_len + 1)).to(p.device, non_blocking=True)
        with torch.autocast(device_type=p.device.split(":")[0], dtype=torch.bfloat16, enabled=p.device != "cpu"):
            logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 10:
            if p.device.startswith("cuda"):
                torch.cuda.synchronize()
            t10 = time.monotonic()
        if step == 30 and t10 is not None:
            if p.device.startswith("cuda"):
                torch.cuda.synchronize()
            rate = 20 / (time.monotonic() - t10)
            fit = int((p.target_seconds - (time.monotonic() - start)) * rate) + step
            if fit < total:
                log(f"target: {total} steps do not fit {p.target_seconds:.0f} s at {rate:.2f} steps/s; "
                    f"training {fit} steps ({fit * per_step:,} tokens) instead")
                total = fit
            else:
                log(f"target: {rate:.2f} steps/s ({rate * per_step:,.0f} tokens/s): {total} steps, about {total / rate:.0f} s")
        if step % 100 == 0 or step == total:
            losses.append((step, loss.item()))
            log(f"target step {step}/{total} loss {loss.item():.3f} lr {opt.param_groups[0]['lr']:.2e}")
    seconds = time.monotonic() - start
    model = model.to(torch.bfloat16)
    held = heldout_loss(model, streams["heldout"], p.seq_len, p.device)
    tokens_per_char = len(streams["heldout"]) / streams["heldout_chars"]
    record = {
        "parameters": params,
        "steps": step,
        "tokens_seen": step * per_step,
        "seconds": round(seconds, 1),
        "train_loss": losses,
        "heldout_nats_per_token": round(held, 4),
        "heldout_bits_per_char": round(held / math.log(2) * tokens_per_char, 4),
        "device": torch.cuda.get_device_name() if p.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
    }
    log(f"target: held-out {held:.3f} nats/token ({record['heldout_bits_per_char']:.3f} bits/char) after {seconds:.0f} s")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, max_shard_size="15MB")
    write_json(out.parent / "target-train.json", record)
    return record


def main() -> None:
    ap = stage_parser(__doc__, work_help="work folder holding corpus/ and tokenizer/")
    args = ap.parse_args()
    p = preset(args.preset, args.device)
    streams = data.streams(args.work / "tokenizer", args.work / "corpus", args.work / "tokens")
    train(p, args.work / "tokenizer", streams, args.work / "target")


if __name__ == "__main__":
    main()
