"""DFlash and DFlash2 drafts in PyTorch, laid out as the published checkpoints.

One module serves training and inference. A forward takes the target's tap
features for a sequence and any number of blocks anchored in it: block row 0
holds the anchor token, rows 1..bs-1 the mask token, at positions
anchor..anchor+bs-1. A block row attends to the context rows strictly before
its anchor and to the rows of its own block, never to another block (the
published training mask); with one block anchored right after the context
this is exactly the inference forward specula runs (spec/dflash.md §5, §6).

The draft owns no embedding and no head: the target's (frozen) embedding
embeds the block and the target's tied output matrix turns the final hidden
state into logits. Norms are plain RMSNorm (w · x̂), unlike the target's 1 + w.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from common import default_taps

SELECTOR_CODEBOOKS = ("predecessor_codebook", "successor_codebook")


def make_draft_config(target: dict, kind: str, *, num_layers: int, block_size: int, mask_token_id: int,
                      intermediate_size: int, taps: list[int] | None = None, selector_rank: int = 64,
                      top_k: int = 16, conv_kernel: int = 2, conv_group: int = 16) -> dict:
    """The config.json of a DFlash ('dflash') or DFlash2 ('dflash2') draft for
    a target config, in the published schema. DFlash drafts use full
    non-causal attention (the original releases); DFlash2 drafts set every
    layer sliding and non-causal as the released DFlash2 configs do."""
    if kind not in ("dflash", "dflash2"):
        raise ValueError(f"draft kind {kind!r}: want 'dflash' or 'dflash2'")
    L = target["num_hidden_layers"]
    taps = list(taps) if taps is not None else default_taps(L, num_layers)
    if not taps or taps[0] < 0 or taps[-1] >= L or any(b <= a for a, b in zip(taps, taps[1:])):
        # z-lab's default rule repeats layers when the target is shallow (L = 4 and
        # 2 draft layers give [1, 1]); specula rejects such a draft at load.
        raise ValueError(f"target_layer_ids {taps} must be strictly ascending within [0, {L}) for a {L}-layer "
                         f"target; pass taps= explicitly")
    if not 0 <= mask_token_id < target["vocab_size"]:
        raise ValueError(f"mask_token_id {mask_token_id} is outside the target's vocabulary [0, {target['vocab_size']})")
    theta = target.get("rope_parameters", {}).get("rope_theta", target.get("rope_theta", 1e7))
    cfg = {
        "architectures": ["DFlashDraftModel" if kind == "dflash" else "DFlash2DraftModel"],
        "model_type": "qwen3",
        "hidden_size": target["hidden_size"],
        "num_hidden_layers": num_layers,
        "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_key_value_heads"],
        "head_dim": target["head_dim"],
        "intermediate_size": intermediate_size,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "rope_theta": theta,
        "max_position_embeddings": target.get("max_position_embeddings", 4096),
        "vocab_size": target["vocab_size"],
        "tie_word_embeddings": False,
        "num_target_layers": L,
        "block_size": block_size,
        "dflash_config": {"block_size": block_size, "mask_token_id": mask_token_id, "target_layer_ids": taps},
        "dtype": "bfloat16",
    }
    if kind == "dflash2":
        cfg["dflash_config"].update({"conv_kernel_size": conv_kernel, "conv_group_size": conv_group,
                                     "selector_rank": selector_rank, "selector_top_k": top_k})
        cfg.update({"is_causal": False, "layer_types": ["sliding_attention"] * num_layers,
                    "sliding_window": 2048, "use_sliding_window": True})
    return cfg


class RMSNorm(nn.Module):
    """Plain RMSNorm (Qwen3 drafts): w · x / rms(x), computed in float32."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * y).to(x.dtype)


def rope(x, positions, theta: float):
    """Rotate-half RoPE over the whole head dim. x [..., heads, n, D], positions [..., n]."""
    D = x.shape[-1]
    inv = theta ** (-torch.arange(0, D, 2, device=x.device, dtype=torch.float64) / D)
    ang = positions.to(torch.float64)[..., None] * inv  # [..., n, D/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1).unsqueeze(-3).to(torch.float32)
    sin = torch.cat([ang.sin(), ang.sin()], -1).unsqueeze(-3).to(torch.float32)
    xf = x.float()
    half = torch.cat([-xf[..., D // 2:], xf[..., :D // 2]], -1)
    return (xf * cos + half * sin).to(x.dtype)


class DynamicConv(nn.Module):
    """DFlash2's grouped dynamic causal convolution over the rows of each block
    (spec/dflash2.md §2). Initialised to the identity: a fresh DFlash2 draft
    computes what its DFlash backbone computes."""

    def __init__(self, hidden: int, kernel: int, group: int):
        super().__init__()
        self.kernel, self.group, self.groups = kernel, group, hidden // group
        self.base_kernel = nn.Parameter(torch.zeros(2, kernel, hidden))
        with torch.no_grad():
            self.base_kernel[:, 0, :] = 1.0
        self.kernel_projection = nn.Linear(hidden, 2 * kernel * self.groups, bias=False)
        nn.init.zeros_(self.kernel_projection.weight)

    def _conv(self, x, dyn, base):
        # x [..., L, H] (L = rows of one block); dyn [..., L, Kc, G]; base [Kc, H]
        w = dyn.repeat_interleave(self.group, dim=-1) + base  # [..., L, Kc, H]
        out = torch.zeros_like(x)
        L = x.shape[-2]
        for j in range(min(self.kernel, L)):
            shifted = x if j == 0 else F.pad(x[..., :L - j, :], (0, 0, j, 0))
            out = out + w[..., :, j, :] * shifted
        return out

    def prepare(self, x):
        dyn = self.kernel_projection(x).unflatten(-1, (2, self.kernel, self.groups))
        return self._conv(x, dyn[..., 0, :, :], self.base_kernel[0]), dyn[..., 1, :, :]

    def finish(self, y, dyn):
        return self._conv(y, dyn, self.base_kernel[1])


class Layer(nn.Module):
    def __init__(self, cfg: dict, layer_type: str, conv: bool):
        super().__init__()
        H, D = cfg["hidden_size"], cfg["head_dim"]
        Hq, Hkv, I, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["rms_norm_eps"]
        self.heads, self.kv_heads, self.head_dim = Hq, Hkv, D
        self.input_layernorm = RMSNorm(H, eps)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(H, Hq * D, bias=False)
        self.self_attn.k_proj = nn.Linear(H, Hkv * D, bias=False)
        self.self_attn.v_proj = nn.Linear(H, Hkv * D, bias=False)
        self.self_attn.o_proj = nn.Linear(Hq * D, H, bias=False)
        self.self_attn.q_norm = RMSNorm(D, eps)
        self.self_attn.k_norm = RMSNorm(D, eps)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(H, I, bias=False)
        self.mlp.up_proj = nn.Linear(H, I, bias=False)
        self.mlp.down_proj = nn.Linear(I, H, bias=False)
        if conv:
            dc = cfg["dflash_config"]
            self.attention_conv = DynamicConv(H, dc["conv_kernel_size"], dc["conv_group_size"])
            self.mlp_conv = DynamicConv(H, dc["conv_kernel_size"], dc["conv_group_size"])
        self.conv = conv
        causal = cfg.get("is_causal", cfg["dflash_config"].get("causal"))
        self.causal = (layer_type == "sliding_attention") if causal is None else bool(causal)
        self.window = cfg.get("sliding_window") if layer_type == "sliding_attention" else None

    def heads_of(self, x, n):
        return x.unflatten(-1, (n, self.head_dim)).transpose(-2, -3)  # [B, n, rows, D]

    def context_kv(self, hctx, ctx_pos, theta):
        a = self.self_attn
        k = rope(a.k_norm(self.heads_of(a.k_proj(hctx), self.kv_heads)), ctx_pos, theta)
        v = self.heads_of(a.v_proj(hctx), self.kv_heads)
        return k, v

    def mask(self, q_pos, q_anchor, q_block, ctx_pos, blk_pos, blk_block):
        """[B, Q, C+Q] visibility: context keys strictly before the query's anchor,
        keys of the query's own block; then the layer's causality and window."""
        ctx = ctx_pos[:, None, :] < q_anchor[:, :, None]
        own = q_block[:, :, None] == blk_block[:, None, :]
        vis = torch.cat([ctx, own], -1)
        k_pos = torch.cat([ctx_pos, blk_pos], -1)[:, None, :]
        qp = q_pos[:, :, None]
        if self.causal:
            vis &= k_pos <= qp
        if self.window:
            vis &= (qp - k_pos) < self.window
            if not self.causal:
                vis &= (k_pos - qp) < self.window
        return vis

    def forward(self, h, bs, ctx_kv, vis, blk_pos, theta):
        a = self.self_attn
        x = self.input_layernorm(h)
        if self.conv:
            x, wa = self.attention_conv.prepare(x.unflatten(1, (-1, bs)))
            x = x.flatten(1, 2)
        q = rope(a.q_norm(self.heads_of(a.q_proj(x), self.heads)), blk_pos, theta)
        k = rope(a.k_norm(self.heads_of(a.k_proj(x), self.kv_heads)), blk_pos, theta)
        v = self.heads_of(a.v_proj(x), self.kv_heads)
        K = torch.cat([ctx_kv[0], k], -2)
        V = torch.cat([ctx_kv[1], v], -2)
        o = F.scaled_dot_product_attention(q, K, V, attn_mask=vis[:, None], scale=self.head_dim ** -0.5,
                                           enable_gqa=self.heads != self.kv_heads)
        o = a.o_proj(o.transpose(1, 2).flatten(-2))
        if self.conv:
            o = self.attention_conv.finish(o.unflatten(1, (-1, bs)), wa).flatten(1, 2)
        h = h + o
        m = self.post_attention_layernorm(h)
        if self.conv:
            m, wm = self.mlp_conv.prepare(m.unflatten(1, (-1, bs)))
            m = m.flatten(1, 2)
        y = self.mlp.down_proj(F.silu(self.mlp.gate_proj(m)) * self.mlp.up_proj(m))
        if self.conv:
            y = self.mlp_conv.finish(y.unflatten(1, (-1, bs)), wm).flatten(1, 2)
        return h + y


class CandidateSelector(nn.Module):
    """DFlash2's low-rank candidate selector (spec/dflash2.md §3)."""

    def __init__(self, vocab: int, hidden: int, rank: int):
        super().__init__()
        self.predecessor_codebook = nn.Parameter(torch.randn(vocab, rank) * 0.02)
        self.successor_codebook = nn.Parameter(torch.zeros(vocab, rank))
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)
        nn.init.normal_(self.hidden_projection.weight, std=0.02)

    def scores(self, hidden, cand_logits, cand_ids, pred_ids):
        """Score of each candidate given one predecessor per row.
        hidden [..., H], cand_logits/cand_ids [..., K], pred_ids [...] -> [..., K]."""
        u = self.hidden_projection(hidden).float()
        a = self.predecessor_codebook[pred_ids].float()
        b = self.successor_codebook[cand_ids].float()
        return cand_logits.float() + torch.einsum("...r,...kr->...k", a * u, b)


class DraftModel(nn.Module):
    """A DFlash or DFlash2 draft built from its config.json."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.cfg = cfg
        arch = cfg["architectures"][0]
        if arch not in ("DFlashDraftModel", "DFlash2DraftModel"):
            raise ValueError(f"architecture {arch!r} is not a DFlash draft")
        self.dflash2 = arch == "DFlash2DraftModel"
        dc = cfg["dflash_config"]
        H, N = cfg["hidden_size"], cfg["num_hidden_layers"]
        self.block_size = dc.get("block_size", cfg.get("block_size"))
        self.mask_token_id = dc["mask_token_id"]
        self.taps = list(dc["target_layer_ids"])
        self.theta = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta"))
        self.fc = nn.Linear(len(self.taps) * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, cfg["rms_norm_eps"])
        types = cfg.get("layer_types") or ["full_attention"] * N
        self.layers = nn.ModuleList(Layer(cfg, t, self.dflash2) for t in types)
        self.norm = RMSNorm(H, cfg["rms_norm_eps"])
        if self.dflash2:
            self.top_k = dc["selector_top_k"]
            self.candidate_selector = CandidateSelector(cfg["vocab_size"], H, dc["selector_rank"])
        for name, p in self.named_parameters():
            if p.ndim == 2 and "candidate_selector" not in name and "kernel_projection" not in name:
                nn.init.normal_(p, std=0.02)

    def forward(self, features, block_ids, anchors, embed):
        """Draft every block in one pass.

        features  [B, T, nTaps·H]: the target's taps at context positions 0..T-1
        block_ids [B, A, bs]: row 0 the anchor token, the rest the mask token
        anchors   [B, A]: each block's anchor position (its context is 0..anchor-1)
        embed     the target's token embedding module
        Returns the final-normed hidden state [B, A, bs, H].
        """
        B, T, _ = features.shape
        A, bs = block_ids.shape[1], block_ids.shape[2]
        dev = features.device
        hctx = self.hidden_norm(self.fc(features))
        ctx_pos = torch.arange(T, device=dev).expand(B, T)
        blk_pos = (anchors[:, :, None] + torch.arange(bs, device=dev)).flatten(1)        # [B, A*bs]
        blk_block = torch.arange(A, device=dev).repeat_interleave(bs).expand(B, -1)      # [B, A*bs]
        q_anchor = anchors.repeat_interleave(bs, dim=1)
        h = embed(block_ids.flatten(1)).to(hctx.dtype)
        masks = {}
        for layer in self.layers:
            key = (layer.causal, layer.window)
            if key not in masks:
                masks[key] = layer.mask(blk_pos, q_anchor, blk_block, ctx_pos, blk_pos, blk_block)
            h = layer(h, bs, layer.context_kv(hctx, ctx_pos, self.theta), masks[key], blk_pos, self.theta)
        return self.norm(h).unflatten(1, (A, bs))

    def select(self, hidden, logits, pred_ids):
        """DFlash2: top-K candidates of each row and the selector's scores given
        one predecessor token per row. hidden [..., H], logits [..., V],
        pred_ids [...] -> (candidate ids [..., K], scores [..., K])."""
        cand_logits, cand_ids = sorted_top_k(logits, self.top_k)
        return cand_ids, self.candidate_selector.scores(hidden, cand_logits, cand_ids, pred_ids)


def sorted_top_k(logits, k):
    """Top-k by descending logit, ties to the lower id (spec/dflash2.md §3.2).
    torch.topk promises no order among equal values, so the candidates are
    put in id order first and then stably sorted by value."""
    vals, ids = torch.topk(logits.float(), k, dim=-1)
    by_id = torch.argsort(ids, dim=-1)
    vals, ids = vals.gather(-1, by_id), ids.gather(-1, by_id)
    by_val = torch.argsort(-vals, dim=-1, stable=True)
    return vals.gather(-1, by_val), ids.gather(-1, by_val)


@torch.no_grad()
def select_path(draft: DraftModel, hidden, logits, anchor: int):
    """DFlash2's inference-time choice for one block, greedy, as the published
    `Select` (spec/dflash2.md §3.2-3.3): candidates are each row's sorted top-K;
    lattice[p, i, j] scores candidate j at row p after candidate i of row p-1
    (row 0's predecessor is the anchor, so all its i are equal); the walk
    starts at lattice[0, 0] and follows the chosen candidate index, argmax
    ties to the lower index. hidden [n, H], logits [n, V] of the predicted
    rows 1..n. Returns (tokens [n], candidate ids [n, K], lattice [n, K, K],
    path index [n])."""
    cand_logits, cand_ids = sorted_top_k(logits, draft.top_k)                 # [n, K]
    n, k = cand_ids.shape
    pred = torch.cat([torch.full_like(cand_ids[:1], anchor), cand_ids[:-1]])  # [n, K]: row p-1's candidates
    lattice = draft.candidate_selector.scores(hidden[:, None, :].expand(n, k, -1), cand_logits[:, None].expand(n, k, k),
                                              cand_ids[:, None].expand(n, k, k), pred)
    path = torch.zeros(n, dtype=torch.long, device=cand_ids.device)
    prev = 0
    for i in range(n):
        prev = int(torch.argmax(lattice[i, prev]))  # first maximum: ties to the lower index
        path[i] = prev
    return cand_ids.gather(-1, path[:, None])[:, 0], cand_ids, lattice, path


def make_blocks(tokens, anchors, block_size: int, mask_token_id: int):
    """Block ids [B, A, bs]: the anchor token, then the mask token."""
    blocks = torch.full((*anchors.shape, block_size), mask_token_id, dtype=torch.long, device=tokens.device)
    blocks[..., 0] = tokens.gather(1, anchors)
    return blocks


def block_labels(tokens, anchors, block_size: int):
    """Labels [B, A, bs] (row k: token anchor+k) and which exist (inside the sequence)."""
    T = tokens.shape[1]
    pos = anchors[..., None] + torch.arange(block_size, device=tokens.device)
    valid = pos < T
    labels = tokens.gather(1, pos.clamp(max=T - 1).flatten(1)).view_as(pos)
    valid[..., 0] = False  # row 0 holds the anchor itself
    return labels, valid


def position_weights(block_size: int, device, gamma: float | None = None):
    """exp(-(k-1)/γ) for rows k = 1..bs-1, 0 for row 0; γ as the paper sets it per block size."""
    if gamma is None:
        gamma = {16: 7.0, 10: 5.0, 8: 4.0}.get(block_size, block_size / 2)
    k = torch.arange(block_size, device=device, dtype=torch.float32)
    w = torch.exp(-(k - 1) / gamma)
    w[0] = 0
    return w


def dflash_loss(logits, labels, valid, weights):
    """Σ w·CE / Σ w over the valid rows; also the argmax accuracy per row."""
    ce = F.cross_entropy(logits.float().flatten(0, -2), labels.flatten(), reduction="none").view_as(labels)
    w = weights * valid
    loss = (w * ce).sum() / w.sum().clamp(min=1e-9)
    correct = (logits.argmax(-1) == labels) & valid
    acc = correct.sum((0, 1)).float() / valid.sum((0, 1)).clamp(min=1)
    return loss, acc


def selector_loss(draft: DraftModel, hidden, logits, labels, valid, block_ids, weights):
    """The selector's cross-entropy over each row's top-K candidates given the
    true predecessor (the anchor for row 1), rows whose truth is not a
    candidate excluded. The backbone's hidden state and logits are detached:
    the selector term trains the selector alone. Returns (loss, recall)."""
    pred = torch.cat([block_ids[..., :1], labels[..., :-1]], -1)  # true token before each row
    cand_ids, scores = draft.select(hidden.detach(), logits.detach(), pred)
    hit = cand_ids == labels[..., None]
    found = hit.any(-1) & valid
    target = hit.float().argmax(-1)
    ce = F.cross_entropy(scores.flatten(0, -2), target.flatten(), reduction="none").view_as(labels)
    w = weights * found
    loss = (w * ce).sum() / w.sum().clamp(min=1e-9)
    recall = found.sum().float() / valid.sum().clamp(min=1)
    return loss, recall


def unembed(hidden, head_weight):
    """Logits through the target's (tied) output matrix."""
    return hidden @ head_weight.to(hidden.dtype).t()


@torch.no_grad()
def block_predictions(draft: DraftModel, features, tokens, anchors, embed, head_weight, truth_predecessors: bool):
    """The draft's token for every row of every block: argmax (DFlash) or the
    selector's choice (DFlash2). With truth_predecessors the DFlash2 walk is
    fed the true tokens, which equals the walk on every accepted prefix."""
    blocks = make_blocks(tokens, anchors, draft.block_size, draft.mask_token_id)
    hidden = draft(features, blocks, anchors, embed)
    logits = unembed(hidden, head_weight).float()
    if not draft.dflash2:
        return logits.argmax(-1)
    labels, _ = block_labels(tokens, anchors, draft.block_size)
    pred = torch.cat([blocks[..., :1], labels[..., :-1]], -1)
    cand_ids, scores = draft.select(hidden, logits, pred)
    return cand_ids.gather(-1, scores.argmax(-1, keepdim=True)).squeeze(-1)


def accepted_lengths(pred, labels, valid):
    """1 + the number of leading rows (from row 1) whose prediction is the truth."""
    ok = (pred == labels) | ~valid
    ok = ok[..., 1:] & valid[..., 1:]
    lead = torch.cumprod(ok.long(), -1).sum(-1)
    return 1 + lead


def config_of(folder: Path) -> dict:
    return json.loads((Path(folder) / "config.json").read_text())


def load_draft(folder: Path, dtype=torch.float32) -> DraftModel:
    """A draft from a folder written by save_draft (or a published checkpoint)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    draft = DraftModel(config_of(folder))
    files = sorted(folder.glob("model*.safetensors"))
    state = {}
    for f in files:
        state.update(load_file(f))
    state = {(k[len("model."):] if k.startswith("model.") else k): v for k, v in state.items()}
    for name in SELECTOR_CODEBOOKS:
        key = f"candidate_selector.{name}"
        if key + ".weight" in state:
            state[key] = state.pop(key + ".weight")
    state = {k: v for k, v in state.items() if not k.startswith(("embed_tokens", "lm_head"))}
    draft.load_state_dict(state, strict=True)
    return draft.to(dtype)


def save_draft(draft: DraftModel, folder: Path, dtype=torch.bfloat16, max_shard_bytes: int = 15 << 20) -> None:
    """config.json and model.safetensors (sharded with an index when larger
    than max_shard_bytes), tensor names as the published checkpoints."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype).contiguous().cpu() for k, v in draft.state_dict().items()}
    cfg = dict(draft.cfg, dtype=str(dtype).removeprefix("torch."))
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for old in folder.glob("model*.safetensors*"):
        old.unlink()
    shards, cur, size = [], {}, 0
    for k in sorted(state):
        n = state[k].numel() * state[k].element_size()
        if cur and size + n > max_shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = state[k]
        size += n
    shards.append(cur)
    if len(shards) == 1:
        save_file(shards[0], folder / "model.safetensors", metadata={"format": "pt"})
        return
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())}, "weight_map": {}}
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, folder / name, metadata={"format": "pt"})
        index["weight_map"].update({k: name for k in shard})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def count_parameters(draft: DraftModel) -> int:
    return sum(p.numel() for p in draft.parameters())

