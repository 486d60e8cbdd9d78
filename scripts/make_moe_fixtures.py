#!/usr/bin/env python3
"""make_moe_fixtures.py: the Qwen3.5 MoE reference fixtures.

Writes, into OUT (normally testdata/fixtures):

  qwen35moe-tiny/      a random Qwen3_5MoeForCausalLM (4 layers: 3 gated
                       delta-net, 1 gated attention; 8 experts, top 2, a
                       shared expert), tied embeddings, weights stored
                       bfloat16 (A_log and the gated norm float32, as
                       released), with transformers' outputs: prompt logits,
                       layer taps, router choices, a greedy continuation, a
                       chunked prefill, a scripted verify-and-rollback loop.
  qwen35moe-tiny-vl/   a random Qwen3_5MoeForConditionalGeneration (hidden
                       32, 2 layers, 6 experts, top 3, untied head, experts
                       stored per expert as transformers saves them, a tiny
                       vision tower that the text path never runs) with its
                       prompt logits, taps and greedy continuation.
  dflash-moe-tiny/     a random DFlash draft and a random DFlash2 draft that
  dflash2-moe-tiny/    fit qwen35moe-tiny (its hidden size, vocabulary and
                       layers), with the draft logits of one block and the
                       greedy speculative loop each runs over the target, as
                       specula's speculation core runs it.

The targets are transformers' own Qwen3.5 MoE classes; the drafts are
train/draft_model.py (this repository's PyTorch DFlash/DFlash2 forward, held
to specula's Go forward by parity tests; --train names the folder). References
are computed on the CPU in float64 from the stored (bfloat16-rounded) weights
and saved as float32.

    /path/to/python scripts/make_moe_fixtures.py testdata/fixtures

needs torch, transformers 5.17 and safetensors (the training environment,
scripts/train-env.sh, has them). The fixtures are committed; CI does not run
this script. Every record a test relies on is in each folder's reference.json
and README.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from transformers import (
    Qwen3_5MoeConfig,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3_5MoeTextConfig,
)

SEED = 20261204
VOCAB = 512
MASK_TOKEN = 511  # the drafts' mask token; never in a prompt
PROMPT_LEN = 24
GREEDY_LEN = 32
BLOCK = 8

# The text decoder of qwen35moe-tiny: the dense qwen35-tiny fixture's
# hybrid layers, with every MLP the sparse block.
TEXT = dict(
    vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4,
    layer_types=["linear_attention"] * 3 + ["full_attention"],
    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                     "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64,
    tie_word_embeddings=True,
)

# qwen35moe-tiny-vl: smaller (hidden 32, two layers), a different expert
# count and top-k, an untied head.
VL_TEXT = dict(TEXT, hidden_size=32, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
               num_attention_heads=4, num_key_value_heads=2, head_dim=16,
               linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
               num_experts=6, num_experts_per_tok=3, moe_intermediate_size=16, shared_expert_intermediate_size=16,
               tie_word_embeddings=False)
VL_VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=2, temporal_patch_size=2,
                 spatial_merge_size=2, out_hidden_size=32, num_position_embeddings=16, in_channels=3)

# Stored in float32 whatever the checkpoint dtype (Qwen3.5 releases do so).
FLOAT32_SUFFIXES = ("linear_attn.A_log", "linear_attn.norm.weight")


# ---------------------------------------------------------------- weights


def draw(name: str, p: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A random value for parameter name, the dense fixtures' recipe plus the
    MoE parts: input projections N(0, 0.6/sqrt(fan_in)), output projections
    N(0, 1.2/sqrt(fan_in)), the router N(0, 2/sqrt(H)) so expert choices are
    well separated, the shared-expert gate N(0, 1/sqrt(H))."""
    def normal(mean, std):
        return torch.randn(p.shape, generator=g, dtype=torch.float64) * std + mean

    fan_in = p.shape[-1]
    if name.endswith("embed_tokens.weight"):
        return normal(0, 0.1)
    if name.endswith("lm_head.weight"):
        return normal(0, 1 / math.sqrt(fan_in))
    if "visual" in name:
        return normal(0, 0.05)
    if name.endswith("linear_attn.norm.weight"):
        return normal(1, 0.1)
    if name.endswith("model.norm.weight") or name == "model.language_model.norm.weight":
        return normal(2, 0.1)
    if name.endswith("norm.weight"):  # zero-centred (1 + w) norms
        return normal(0, 0.1)
    if name.endswith("A_log"):
        return torch.log(torch.rand(p.shape, generator=g, dtype=torch.float64) * 1.95 + 0.05)
    if name.endswith("dt_bias"):
        return normal(0, 0.5)
    if name.endswith("conv1d.weight"):
        return normal(0, 0.3)
    if name.endswith("mlp.gate.weight"):
        return normal(0, 2 / math.sqrt(fan_in))
    if name.endswith("shared_expert_gate.weight"):
        return normal(0, 1 / math.sqrt(fan_in))
    if any(name.endswith(s) for s in ("out_proj.weight", "o_proj.weight", "down_proj.weight", "experts.down_proj")):
        return normal(0, 1.2 / math.sqrt(fan_in))
    if p.ndim >= 2:
        return normal(0, 0.6 / math.sqrt(fan_in))
    raise SystemExit(f"no recipe for parameter {name} {tuple(p.shape)}")


def stored_dtype(name: str) -> torch.dtype:
    return torch.float32 if name.endswith(FLOAT32_SUFFIXES) else torch.bfloat16


@torch.no_grad()
def randomise(model: torch.nn.Module, seed: int) -> list[str]:
    """Draws every parameter and rounds it to its stored dtype, so the float
    model holds exactly the values the checkpoint stores. Returns the names
    of the parameters that were drawn (all of them)."""
    g = torch.Generator().manual_seed(seed)
    names = []
    for name, p in model.named_parameters():
        v = draw(name, p, g).to(stored_dtype(name)).to(p.dtype)
        p.copy_(v)
        names.append(name)
    return names


def save_checkpoint(model, out: Path, fused: bool) -> dict:
    """save_pretrained (config.json as transformers writes it), then the
    weights rewritten in their stored dtypes; returns {name: shape}.

    transformers 5.17 saves Qwen3.5 MoE experts per expert
    (mlp.experts.{e}.{gate,up,down}_proj.weight), undoing the fusion it
    applies at load; fused=True writes the model's own parameters instead
    (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]),
    the layout of the released checkpoints."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    path = out / "model.safetensors"
    tensors = load_file(path)
    if fused:
        tied = model.config.get_text_config().tie_word_embeddings
        tensors = {k: v.detach().clone() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    tensors = {k: v.to(stored_dtype(k)).contiguous() for k, v in sorted(tensors.items())}
    save_file(tensors, path, metadata={"format": "pt"})
    cfg = json.loads((out / "config.json").read_text())
    cfg["dtype"] = "bfloat16"
    if "text_config" in cfg:
        cfg["text_config"]["dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return {k: list(v.shape) for k, v in tensors.items()}


# ---------------------------------------------------------------- recording


class Recorder:
    """Forward hooks on a text decoder: the residual stream after each layer
    (the taps) and each router's logits, plus the smallest routing margin
    seen: the gap, in router logits, between the k-th and the (k+1)-th
    expert of any row of any forward while recording."""

    def __init__(self, text_model, top_k: int):
        self.top_k = top_k
        self.layer_out: dict[int, torch.Tensor] = {}
        self.router_logits: dict[int, torch.Tensor] = {}
        self.min_routing_margin = math.inf
        self.hooks = []
        for i, layer in enumerate(text_model.layers):
            self.hooks.append(layer.register_forward_hook(lambda m, a, o, i=i: self.layer_out.__setitem__(i, o)))
            self.hooks.append(layer.mlp.gate.register_forward_hook(lambda m, a, o, i=i: self.router(i, o)))

    def router(self, i, out):
        logits = out[0].detach().double()
        self.router_logits[i] = logits
        top = logits.topk(self.top_k + 1, -1).values
        self.min_routing_margin = min(self.min_routing_margin, (top[:, -2] - top[:, -1]).min().item())

    def taps(self) -> torch.Tensor:
        return torch.stack([self.layer_out[i][0] for i in sorted(self.layer_out)])  # [layers, L, H]

    def routes(self):
        """Expert ids [layers, L, k] (descending probability, as torch.topk
        orders them) and their renormalised weights."""
        ids, weights = [], []
        for i in sorted(self.router_logits):
            probs = torch.softmax(self.router_logits[i], -1)
            v, idx = probs.topk(self.top_k, -1)
            ids.append(idx)
            weights.append(v / v.sum(-1, keepdim=True))
        return torch.stack(ids), torch.stack(weights)


class Margin:
    """The smallest top-1/top-2 gap of every argmax decision recorded."""

    def __init__(self):
        self.value, self.where = math.inf, ""

    def argmax(self, logits: torch.Tensor, where: str) -> list[int]:
        top = logits.double().topk(2, -1).values
        gaps = top[..., 0] - top[..., 1]
        if gaps.min().item() < self.value:
            self.value, self.where = gaps.min().item(), where
        return logits.argmax(-1).tolist()


def maxabs(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


def step(model, ids: list[int], cache):
    """One cached forward of ids after what cache holds: logits [L, V]."""
    out = model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return out.logits[0], out.past_key_values


def new_cache(model):
    return transformers.DynamicCache(config=model.config.get_text_config())


# ---------------------------------------------------------------- target references


def target_references(model, text_model, top_k, prompt, margin: Margin, greedy_len=GREEDY_LEN, full=True):
    """Reference tensors and records of one target (float64 model)."""
    rec = Recorder(text_model, top_k)
    ref, info = {}, {}
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=False)
        logits = out.logits[0]
        ref["prompt_ids"] = torch.tensor(prompt)
        ref["embeddings"] = text_model.embed_tokens(torch.tensor(prompt))
        ref["hidden_per_layer"] = rec.taps()
        ref["final_hidden"] = text_model.norm(ref["hidden_per_layer"][-1])
        ref["logits"] = logits
        ids, weights = rec.routes()
        ref["router_expert_ids"], ref["router_weights"] = ids, weights

        # Greedy continuation with the cache (and a few tokens more, for the
        # scripted loop's drafts).
        cache = new_cache(model)
        row, cache = step(model, prompt, cache)
        info["cached_prefill_vs_full_maxabs"] = maxabs(row, logits)
        row = row[-1]
        greedy, step_logits = [], []
        for k in range(greedy_len + BLOCK):
            tok = margin.argmax(row, f"greedy step {k}")
            greedy.append(tok)
            if k < greedy_len:
                step_logits.append(row)
            nxt, cache = step(model, [tok], cache)
            row = nxt[-1]
        ref["greedy_ids"] = torch.tensor(greedy[:greedy_len])
        ref["greedy_step_logits"] = torch.stack(step_logits)
        full_seq = model(input_ids=torch.tensor([prompt + greedy[: greedy_len - 1]]), use_cache=False).logits[0]
        info["greedy_step_vs_full_forward_logits_maxabs"] = maxabs(ref["greedy_step_logits"], full_seq[len(prompt) - 1:])
        info["greedy_full_forward_argmax_equal"] = full_seq[len(prompt) - 1:].argmax(-1).tolist() == greedy[:greedy_len]
        if not full:
            return ref, info, greedy, rec

        # A chunk of several tokens after a cached prefill: every row routes
        # on its own, so the chunk equals the full forward's rows.
        cache = new_cache(model)
        pre, cache = step(model, prompt[:16], cache)
        chunk, cache = step(model, prompt[16:21], cache)
        ref["multi_token_chunk_logits"] = chunk
        singles = new_cache(model)
        step(model, prompt[:16], singles)
        one = torch.cat([step(model, [t], singles)[0] for t in prompt[16:21]])
        info["multi_token_check"] = {
            "prefill": 16, "chunk": 5,
            "prefill_vs_full_maxabs": maxabs(pre, logits[:16]),
            "chunk_vs_full_maxabs": maxabs(chunk, logits[16:21]),
            "single_steps_vs_full_maxabs": maxabs(one, logits[16:21]),
            "chunk_vs_single_steps_maxabs": maxabs(chunk, one),
        }

        # rollback_check: prefill 16, verify 6, keep only the first, feed
        # prompt[17]; the state is restored from a copy and the kept token
        # replayed (transformers' own crop leaves the delta-net state as it
        # was after the rejected tokens).
        cache = new_cache(model)
        step(model, prompt[:16], cache)
        saved = copy.deepcopy(cache)
        step(model, prompt[16:22], cache)
        cache = saved
        step(model, prompt[16:17], cache)
        after, _ = step(model, prompt[17:18], cache)
        info["rollback_check"] = {
            "setup": "prefill 16 prompt tokens, verify 6 more, keep only the first of them, then feed prompt[17] and compare its logits with the full forward",
            "snapshot_and_replay_maxabs": maxabs(after[0], logits[17]),
        }

        # The scripted verify loop (no draft model): round r drafts
        # scripted[r] true greedy tokens, one wrong token, then random ids.
        gen = torch.Generator().manual_seed(SEED + 1)
        scripted = [2, 7, 0, 4, 1, 7, 3]
        cache = new_cache(model)
        step(model, prompt, cache)
        t0, start, emitted, rounds, rows, offsets = greedy[0], len(prompt), [greedy[0]], [], [], [0]
        for r, k in enumerate(scripted):
            if len(emitted) >= greedy_len:
                break
            pos = start - len(prompt)  # index of t0 in greedy
            drafts = greedy[pos + 1: pos + 1 + k]
            wrong = (greedy[pos + 1 + k] + 1 + int(torch.randint(0, VOCAB - 3, (1,), generator=gen))) % (VOCAB - 1)
            while len(drafts) < BLOCK - 1:
                drafts.append(wrong if len(drafts) == k else int(torch.randint(0, VOCAB - 1, (1,), generator=gen)))
            size = min(BLOCK, greedy_len - len(emitted) + 1)
            block = [t0] + drafts[: size - 1]
            saved = copy.deepcopy(cache)
            vl, _ = step(model, block, cache)
            am = margin.argmax(vl, f"scripted round {r}")
            a = 0
            while a < len(block) - 1 and block[a + 1] == am[a]:
                a += 1
            rows.append(vl)
            offsets.append(offsets[-1] + len(block))
            rounds.append({"start": start, "verify_size": len(block), "scripted_correct_drafts": k, "block_ids": block,
                           "target_argmax": am[: a + 1], "accepted_drafts": a, "acceptance_length": a + 1, "bonus": am[a]})
            cache = saved
            step(model, block[: a + 1], cache)
            emitted += block[1: a + 1] + [am[a]]
            start += a + 1
            t0 = am[a]
        ref["scripted_verify_logits"] = torch.cat(rows)
        info["scripted_spec_loop"] = {
            "block_size": BLOCK,
            "note": "target-only verify/rollback loop: drafts are the known greedy tokens for the first N positions, then one wrong token, then random ids; rollback restores a copy of the state from before the verify and replays the kept tokens",
            "emitted_ids": emitted[:greedy_len], "emitted_equals_greedy": emitted[:greedy_len] == greedy[:greedy_len],
            "acceptance_lengths": [r["acceptance_length"] for r in rounds], "rounds": rounds,
            "verify_logits_row_offsets": offsets,
        }
    return ref, info, greedy, rec


def float32_check(model32, prompt, ref) -> float:
    with torch.no_grad():
        return maxabs(model32(input_ids=torch.tensor([prompt]), use_cache=False).logits[0], ref["logits"])


def reload_check(model, reloaded, prompt) -> float:
    """The saved folder, loaded by transformers, against the model that
    wrote it (float32 both): 0 when every tensor round-tripped."""
    with torch.no_grad():
        ids = torch.tensor([prompt])
        return maxabs(model(input_ids=ids, use_cache=False).logits, reloaded(input_ids=ids, use_cache=False).logits)


def write_reference(out: Path, ref: dict, info: dict):
    tensors = {}
    for k, v in ref.items():
        v = v.detach()
        tensors[k] = v.to(torch.int64 if not v.is_floating_point() else torch.float32).contiguous()
    save_file(tensors, out / "reference.safetensors", metadata={"format": "pt"})
    (out / "reference.json").write_text(json.dumps(info, indent=1) + "\n")


def versions() -> dict:
    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "python": platform.python_version()}


def make_target(out: Path, prompt: list[int]):
    """qwen35moe-tiny (Qwen3_5MoeForCausalLM)."""
    torch.manual_seed(SEED)
    cfg = Qwen3_5MoeTextConfig(**TEXT)
    cfg.architectures = ["Qwen3_5MoeForCausalLM"]
    model = Qwen3_5MoeForCausalLM(cfg).float().eval()
    model.set_experts_implementation("eager")
    drawn = randomise(model, SEED)
    folder = out / "qwen35moe-tiny"
    shapes = save_checkpoint(model, folder, fused=True)

    reloaded = Qwen3_5MoeForCausalLM.from_pretrained(folder, dtype=torch.float32, experts_implementation="eager").eval()
    model64 = copy.deepcopy(reloaded).double()
    margin = Margin()
    ref, info, greedy, rec = target_references(model64, model64.model, TEXT["num_experts_per_tok"], prompt, margin)
    info = {
        "fixture": "qwen35moe-tiny", "seed": SEED, "generated_with": versions(),
        "precision": {"weights": "bfloat16 as stored (A_log and linear_attn.norm float32)",
                      "reference_compute": "float64 on CPU from the stored weights; transformers computes RMSNorm, the router softmax, the gated-delta-rule kernels, the RoPE tables and the GDN decay in float32 internally",
                      "stored_tensors": "float32 (ids int64)"},
        "prompt_ids": prompt, "greedy_ids": greedy[:GREEDY_LEN],
        "min_decision_margin": {"value": margin.value, "where": margin.where},
        "min_routing_margin": rec.min_routing_margin,
        "float32_vs_float64_logits_maxabs": float32_check(reloaded, prompt, ref),
        "reload_logits_maxabs": reload_check(model, reloaded, prompt),
        **info,
        "config": TEXT,
        "all_parameters_randomised": drawn,
        "checkpoint": {"checkpoint_class": "Qwen3_5MoeForCausalLM", "tensors": shapes},
    }
    write_reference(folder, ref, info)
    print(f"qwen35moe-tiny: routing margin {rec.min_routing_margin:.3g}, decision margin {margin.value:.3g} ({margin.where}), "
          f"acceptance {info['scripted_spec_loop']['acceptance_lengths']}, float32 vs float64 {info['float32_vs_float64_logits_maxabs']:.2g}")
    return reloaded, greedy


def make_vl(out: Path, prompt: list[int]):
    """qwen35moe-tiny-vl (Qwen3_5MoeForConditionalGeneration)."""
    torch.manual_seed(SEED + 2)
    cfg = Qwen3_5MoeConfig(text_config=VL_TEXT, vision_config=VL_VISION, tie_word_embeddings=False)
    cfg.architectures = ["Qwen3_5MoeForConditionalGeneration"]
    model = Qwen3_5MoeForConditionalGeneration(cfg).float().eval()
    model.set_experts_implementation("eager")
    drawn = randomise(model, SEED + 2)
    folder = out / "qwen35moe-tiny-vl"
    shapes = save_checkpoint(model, folder, fused=False)
    reloaded = Qwen3_5MoeForConditionalGeneration.from_pretrained(folder, dtype=torch.float32, experts_implementation="eager").eval()
    model64 = copy.deepcopy(reloaded).double()
    margin = Margin()
    ref, info, greedy, rec = target_references(model64, model64.model.language_model, VL_TEXT["num_experts_per_tok"],
                                               prompt, margin, greedy_len=16, full=False)
    info = {
        "fixture": "qwen35moe-tiny-vl", "seed": SEED + 2, "generated_with": versions(),
        "prompt_ids": prompt, "greedy_ids": greedy[:16],
        "min_decision_margin": {"value": margin.value, "where": margin.where},
        "min_routing_margin": rec.min_routing_margin,
        "float32_vs_float64_logits_maxabs": float32_check(reloaded, prompt, ref),
        "reload_logits_maxabs": reload_check(model, reloaded, prompt),
        **info,
        "text_config": VL_TEXT, "vision_config": VL_VISION,
        "all_parameters_randomised": drawn,
        "checkpoint": {"checkpoint_class": "Qwen3_5MoeForConditionalGeneration", "tensors": shapes},
    }
    write_reference(folder, ref, info)
    print(f"qwen35moe-tiny-vl: routing margin {rec.min_routing_margin:.3g}, decision margin {margin.value:.3g} ({margin.where})")


# ---------------------------------------------------------------- drafts

TAPS = [0, 2]


def draft_config(dflash2: bool) -> dict:
    """The drafts' config.json: the nested schema of the June 2026 releases
    (spec/dflash.md section 2), the dflash-tiny fixture's sizes but a
    SwiGLU of 64 (to keep the fixtures small), and the attention of each
    released family as train/draft_model.py implements it: DFlash every layer full attention, non-causal; DFlash2 every layer
    sliding (window 16, shorter than the loop's context), non-causal
    (is_causal false)."""
    n = 2
    dc = {"block_size": BLOCK, "mask_token_id": MASK_TOKEN, "target_layer_ids": TAPS, "num_target_layers": TEXT["num_hidden_layers"]}
    cfg = {
        "architectures": ["DFlash2DraftModel" if dflash2 else "DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": TEXT["hidden_size"], "num_hidden_layers": n, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 64, "hidden_act": "silu", "attention_bias": False, "rms_norm_eps": 1e-6,
        "vocab_size": VOCAB, "max_position_embeddings": 4096, "rope_theta": 1e7, "tie_word_embeddings": False,
        "num_target_layers": TEXT["num_hidden_layers"], "dtype": "bfloat16",
    }
    if dflash2:
        dc.update({"conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 4})
        cfg.update({"layer_types": ["sliding_attention"] * n, "sliding_window": 16, "use_sliding_window": True, "is_causal": False})
    else:
        cfg.update({"layer_types": ["full_attention"] * n, "use_sliding_window": False})
    cfg["dflash_config"] = dc
    return cfg


@torch.no_grad()
def randomise_draft(draft: torch.nn.Module, seed: int) -> list[str]:
    """Draws every draft parameter (the dflash-tiny recipe: plain norms
    N(1, 0.1), the final norm N(3, 0.2), fc N(0, 1/sqrt(fan_in)), input
    projections N(0, 0.6/sqrt(fan_in)), o_proj and down_proj
    N(0, 1.5/sqrt(fan_in)); DFlash2's base kernels near identity (tap 0
    N(1, 0.2), the other N(0, 0.3)), its kernel projections
    N(0, 0.2/sqrt(fan_in)), the selector's codebooks N(0, 1) and hidden
    projection N(0, 1/sqrt(fan_in))), rounded to bfloat16 as stored."""
    g = torch.Generator().manual_seed(seed)
    names = []
    for name, p in draft.named_parameters():
        def normal(mean, std):
            return torch.randn(p.shape, generator=g, dtype=torch.float64) * std + mean
        fan_in = p.shape[-1]
        if name == "norm.weight":
            v = normal(3, 0.2)
        elif name.endswith("norm.weight"):
            v = normal(1, 0.1)
        elif name.endswith("base_kernel"):
            v = normal(0, 0.3)
            v[:, 0, :] = normal(1, 0.2)[:, 0, :]
        elif name.endswith("kernel_projection.weight"):
            v = normal(0, 0.2 / math.sqrt(fan_in))
        elif "codebook" in name:
            v = normal(0, 1)
        elif name == "fc.weight" or name.endswith("hidden_projection.weight"):
            v = normal(0, 1 / math.sqrt(fan_in))
        elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            v = normal(0, 1.5 / math.sqrt(fan_in))
        elif p.ndim == 2:
            v = normal(0, 0.6 / math.sqrt(fan_in))
        else:
            raise SystemExit(f"no recipe for draft parameter {name} {tuple(p.shape)}")
        p.copy_(v.to(torch.bfloat16).to(p.dtype))
        names.append(name)
    return names


def propose(dm, draft, hidden, logits, anchor: int, margin: Margin, where: str) -> list[int]:
    """The draft's greedy tokens for one block (hidden [7, H], logits
    [7, V]), recording decision margins: for DFlash the argmax gap of each
    row; for DFlash2 the gap at the top-K boundary of each row's candidates
    and the gap of the selector's choice given the previous token."""
    if not draft.dflash2:
        return margin.argmax(logits, where)
    k = draft.cfg["dflash_config"]["selector_top_k"]
    top = logits.double().topk(k + 1, -1)
    gap = (top.values[:, k - 1] - top.values[:, k]).min().item()
    if gap < margin.value:
        margin.value, margin.where = gap, where + " (top-K boundary)"
    unary, cands = logits.topk(k, -1)
    prev, out = anchor, []
    for p in range(logits.shape[0]):
        scores = draft.candidate_selector.scores(hidden[p], unary[p], torch.tensor(prev), cands[p])
        prev = int(cands[p][margin.argmax(scores, where + " (selector)")])
        out.append(prev)
    ref = dm.greedy_drafts(draft, hidden[None], logits[None], torch.tensor([anchor]))[0].tolist()
    assert out == ref, (out, ref)
    return out


@torch.no_grad()
def spec_loop(dm, target, draft, prompt: list[int], budget: int, margin: Margin):
    """Greedy speculative decoding of budget tokens after prompt, the way
    specula's speculation core runs it (spec/speculation.md): the prompt but
    its last token is prefilled, the last token is the first anchor; each
    round drafts min(7, remaining - 1) tokens from a full block [anchor,
    MASK x 7] whose context is the target's tap features of every committed
    slot, verifies [anchor, drafts] in one cached target forward, accepts the
    longest prefix matching the target's argmax, emits it and the bonus, and
    restores the target's state from a copy and replays the kept rows; a
    round with nothing to draft is a plain step."""
    embed = target.model.embed_tokens
    rec = Recorder(target.model, TEXT["num_experts_per_tok"])
    taps = lambda n: torch.cat([rec.layer_out[i][0, :n] for i in TAPS], -1)  # noqa: E731
    cache = new_cache(target)
    step(target, prompt[:-1], cache)
    feats = taps(len(prompt) - 1)
    seq, start, emitted, rounds, first_logits = list(prompt), len(prompt) - 1, [], [], None
    while len(emitted) < budget:
        anchor = seq[start]
        d = min(BLOCK - 1, budget - len(emitted) - 1)
        if d == 0:
            row, cache = step(target, [anchor], cache)
            tok = margin.argmax(row[-1], f"plain step at slot {start}")
            feats = torch.cat([feats, taps(1)])
            emitted.append(tok)
            seq.append(tok)
            start += 1
            continue
        ids = torch.tensor([seq[: start + 1]])
        hidden = draft(feats[None], ids, torch.tensor([[start]]), embed)[0, 1:]
        logits = hidden @ embed.weight.T
        if first_logits is None:
            first_logits = logits
        drafts = propose(dm, draft, hidden, logits, anchor, margin, f"draft round {len(rounds)}")[:d]
        block = [anchor] + drafts
        saved = copy.deepcopy(cache)
        vl, _ = step(target, block, cache)
        am = margin.argmax(vl, f"verify round {len(rounds)}")
        a = 0
        while a < d and block[a + 1] == am[a]:
            a += 1
        feats = torch.cat([feats, taps(a + 1)])
        rounds.append({"start": start, "verify_size": len(block), "block_ids": block, "target_argmax": am[: a + 1],
                       "accepted_drafts": a, "acceptance_length": a + 1, "bonus": am[a]})
        cache = saved
        step(target, block[: a + 1], cache)
        emitted += block[1: a + 1] + [am[a]]
        seq += block[1: a + 1] + [am[a]]
        start += a + 1
    return emitted, rounds, first_logits


def make_drafts(out: Path, train_dir: Path, prompt: list[int]):
    """dflash-moe-tiny and dflash2-moe-tiny: random drafts for qwen35moe-tiny
    (train/draft_model.py's forward), with the greedy speculative loop each
    runs over the target."""
    sys.path.insert(0, str(train_dir))
    import draft_model  # noqa: E402  (train/)

    folder = out / "qwen35moe-tiny"
    target = Qwen3_5MoeForCausalLM.from_pretrained(folder, dtype=torch.float32, experts_implementation="eager").eval()
    target64 = copy.deepcopy(target).double()
    greedy = json.loads((folder / "reference.json").read_text())["greedy_ids"]
    commit = draft_model_commit(train_dir)
    for dflash2, name, base in [(False, "dflash-moe-tiny", SEED + 5), (True, "dflash2-moe-tiny", SEED + 7)]:
        cfg = draft_config(dflash2)
        # A random draft's near-ties would make its float32 ports disagree
        # with the float64 reference by chance: draw again (the next seed)
        # until every decision of the loop has a margin of at least 1e-3.
        for seed in range(base, base + 1000, 100):
            draft = draft_model.DraftModel(cfg).float().eval()
            drawn = randomise_draft(draft, seed)
            draft64 = copy.deepcopy(draft).double()
            margin = Margin()
            emitted, rounds, first = spec_loop(draft_model, target64, draft64, prompt, GREEDY_LEN, margin)
            if margin.value >= 1e-3:
                break
            print(f"{name}: seed {seed} has a decision margin of {margin.value:.3g} ({margin.where}); drawing again")
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        save_file({k: v.detach().to(torch.bfloat16).contiguous() for k, v in sorted(draft.state_dict().items())},
                  str(d / "model.safetensors"), metadata={"format": "pt"})
        info = {
            "fixture": name, "seed": seed, "generated_with": {**versions(), "train_draft_model_py": commit},
            "target": "../qwen35moe-tiny", "prompt_ids": prompt, "target_greedy_ids": greedy,
            "min_decision_margin": {"value": margin.value, "where": margin.where},
            "all_parameters_randomised": drawn,
            "spec_loop": {"budget": GREEDY_LEN, "depth": BLOCK - 1, "emitted_ids": emitted,
                          "emitted_equals_greedy": emitted == greedy,
                          "acceptance_lengths": [r["acceptance_length"] for r in rounds], "rounds": rounds},
        }
        save_file({"first_block_draft_logits": first.float().contiguous()}, d / "reference.safetensors", metadata={"format": "pt"})
        (d / "reference.json").write_text(json.dumps(info, indent=1) + "\n")
        print(f"{name}: acceptance {info['spec_loop']['acceptance_lengths']}, equals greedy {emitted == greedy}, "
              f"decision margin {margin.value:.3g} ({margin.where})")


def draft_model_commit(train_dir: Path) -> str:
    """The git commit of train/draft_model.py, or "unknown" outside a checkout."""
    import subprocess
    try:
        return subprocess.run(["git", "-C", str(train_dir), "log", "-1", "--format=%H", "--", "draft_model.py"],
                              capture_output=True, text=True, check=True).stdout.strip() or "uncommitted"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the fixtures folder (testdata/fixtures)")
    ap.add_argument("--only", choices=["targets", "drafts"], help="make only these")
    ap.add_argument("--train", type=Path, default=Path(__file__).resolve().parent.parent / "train",
                    help="the repository's train/ folder (draft_model.py)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(SEED)
    prompt = torch.randint(0, VOCAB - 2, (PROMPT_LEN,), generator=g).tolist()
    if args.only != "drafts":
        make_target(args.out, prompt)
        make_vl(args.out, prompt)
    if args.only != "targets":
        make_drafts(args.out, args.train, prompt)


if __name__ == "__main__":
    sys.exit(main())
