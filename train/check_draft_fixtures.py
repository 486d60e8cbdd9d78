"""Prove train/draft_model.py computes what z-lab's reference draft computes.

    python train/check_draft_fixtures.py [--fixtures testdata/fixtures]

The fixtures dflash-tiny and dflash2-tiny hold random-weight drafts for the
target qwen35-tiny and tensors made by z-lab's reference draft code (read
their README.md). This script runs the target with transformers for the tap
features, then checks, printing each max abs difference:

1. the inference forward (one block right after the 24-token prompt) against
   every reference tensor: projected context, per-layer outputs, block hidden,
   logits, drafted ids, and DFlash2's candidates, lattice and greedy path;
2. the training forward — two sequences of 56 tokens, seven anchors each,
   some blocks running past the end — at anchor 24 against the same
   references, at every anchor against the one-block forward, and at the
   scripted loop's anchors against the drafts the reference recorded there;
3. simulated acceptance on sequences whose truth is the reference's own
   drafts (accepted length 8, and 4 once the truth at row 4 is changed);
4. hand-computed cases: the loss and its weights, the selector loss, the
   DFlash2 convolution's worked example (spec/dflash2.md §2.3), a fresh
   DFlash2 draft equal to its DFlash backbone, a sharded save/load, and
   make_draft_config refusing taps that specula would reject.

Tolerances: the fixtures' own (1e-3 absolute on hidden states and logits, ids
exact); the training forward against the one-block forward 1e-9 (float64, the
same math). Exits non-zero on any mismatch. CPU only, a few seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import draft_model as dm  # noqa: E402

TOL = 1e-3
SELF_TOL = 1e-9
failures: list[str] = []


def report(name: str, ok: bool, detail: str) -> None:
    print(f"  {'ok  ' if ok else 'FAIL'} {name}: {detail}")
    if not ok:
        failures.append(name)


def check(name: str, got, want, tol: float = TOL) -> None:
    got, want = torch.as_tensor(got), torch.as_tensor(want)
    if got.shape != want.shape:
        return report(name, False, f"shape {tuple(got.shape)} != {tuple(want.shape)}")
    if not want.is_floating_point():
        bad = int((got.long() != want.long()).sum())
        return report(name, bad == 0, "equal" if bad == 0 else f"{bad} differ: {got.tolist()} vs {want.tolist()}")
    diff = (got.double() - want.double()).abs().max().item() if got.numel() else 0.0
    report(name, diff <= tol, f"max abs diff {diff:.3g} (tol {tol:g})")


def tap_features(target, ids: torch.Tensor, taps) -> torch.Tensor:
    """[B, T, nTaps·H]: residual stream after each tap layer (hidden_states[i+1])."""
    with torch.no_grad():
        hs = target(input_ids=ids, output_hidden_states=True).hidden_states
    return torch.cat([hs[i + 1] for i in taps], dim=-1)


def one_block(draft, feats_ctx, block, embed, head, keep_layers=False):
    """The inference forward: one block at positions C.. after context rows 0..C-1
    (the same module, one anchor at C). Returns (hidden [L, H], logits [L-1, V],
    per-layer residuals [N, L, H] when asked)."""
    outs = []
    hooks = [layer.register_forward_hook(lambda m, i, o: outs.append(o[0])) for layer in draft.layers] if keep_layers else []
    c = feats_ctx.shape[0]
    with torch.no_grad():
        hidden = draft(feats_ctx[None], block[None, None], torch.tensor([[c]]), embed)[0, 0]
    for h in hooks:
        h.remove()
    return hidden, dm.unembed(hidden[1:], head), (torch.stack(outs) if keep_layers else None)


def drafted(draft, hidden, logits, anchor: int):
    """What the draft proposes: argmax (DFlash) or the selector's greedy path (DFlash2)."""
    if draft.dflash2:
        return dm.select_path(draft, hidden[1:], logits, anchor)[0]
    return logits.argmax(-1)


def check_fixture(fx: Path, target, prompt: list, greedy: list) -> None:
    from safetensors.torch import load_file

    ref = load_file(str(fx / "reference.safetensors"))
    meta = json.loads((fx / "reference.json").read_text())
    draft = dm.load_draft(fx).double().eval()
    print(f"{fx.name} ({draft.cfg['architectures'][0]}):")
    embed, head = target.model.embed_tokens, target.lm_head.weight
    c = len(prompt)
    seq = torch.tensor([prompt + greedy])                                       # [1, 56]
    feats = tap_features(target, seq, draft.taps)
    check("target taps of the prompt vs context_features", feats[0, :c], ref["context_features"])

    # 1. Inference forward.
    block = ref["block_ids"]
    with torch.no_grad():
        check("context_projected", draft.hidden_norm(draft.fc(feats[0, :c])), ref["context_projected"])
    hidden, logits, layers = one_block(draft, feats[0, :c], block, embed, head, keep_layers=True)
    check("layer_outputs", layers, ref["layer_outputs"])
    check("block_hidden", hidden, ref["block_hidden"])
    check("draft_logits", logits, ref["draft_logits"])
    check("draft_tokens", drafted(draft, hidden, logits, int(block[0])), ref["draft_tokens"])
    if draft.dflash2:
        tokens, cand, lattice, path = dm.select_path(draft, hidden[1:], logits, int(block[0]))
        check("selector_candidates (sorted top-K)", cand, ref["selector_candidates"])
        check("selector_lattice", lattice, ref["selector_lattice"])
        check("selector_path_index", path, ref["selector_path_index"])
        check("plain argmax differs as recorded", logits.argmax(-1), torch.tensor(meta["draft_argmax_tokens"]))

    # 2. Training forward: two sequences, seven anchors each (T = 56).
    rounds = meta["scripted_spec_loop_with_draft_shadow"]["rounds"]
    starts = [r["start"] for r in rounds]                                       # 24, 27, 35, 36, 41, 43, 51
    other = [0, 5, 13, 24, 30, 49, 55]
    tokens = seq.expand(2, -1).contiguous()
    anchors = torch.tensor([starts, other])
    blocks = dm.make_blocks(tokens, anchors, draft.block_size, draft.mask_token_id)
    with torch.no_grad():
        thidden = draft(feats.expand(2, -1, -1), blocks, anchors, embed)
    tlogits = dm.unembed(thidden, head)
    for b, al in enumerate((starts, other)):
        i = al.index(24)
        check(f"training forward, sequence {b}, anchor 24: block_hidden", thidden[b, i], ref["block_hidden"])
        check(f"training forward, sequence {b}, anchor 24: draft_logits", tlogits[b, i, 1:], ref["draft_logits"])
    worst = 0.0
    for b, al in enumerate((starts, other)):
        for i, a in enumerate(al):
            h1, l1, _ = one_block(draft, feats[0, :a], blocks[b, i], embed, head)
            worst = max(worst, (h1 - thidden[b, i]).abs().max().item(), (l1 - tlogits[b, i, 1:]).abs().max().item())
    check("training forward == one-block forward at every anchor", worst, 0.0, SELF_TOL)
    # The reference drafted the shortened last round (verify_size 5) with a 5-row
    # block (anchor + 4 masks, spec/dflash.md §7): compare that round with a
    # one-block forward of that length, the full rounds with the training forward.
    mism = []
    for i, r in enumerate(rounds):
        n = len(r["draft_proposal"])
        if n == draft.block_size - 1:
            got = drafted(draft, thidden[0, i], tlogits[0, i, 1:], int(blocks[0, i, 0]))
        else:
            h1, l1, _ = one_block(draft, feats[0, : r["start"]], blocks[0, i, : n + 1], embed, head)
            got = drafted(draft, h1, l1, int(blocks[0, i, 0]))
        if got.tolist() != r["draft_proposal"]:
            mism.append((r["start"], got.tolist(), r["draft_proposal"]))
    report(f"drafts at the scripted loop's anchors {starts}", not mism, "equal" if not mism else str(mism))
    _, valid = dm.block_labels(tokens, anchors, draft.block_size)
    t = tokens.shape[1]
    want = torch.tensor([[[0 < k and a + k < t for k in range(draft.block_size)] for a in al] for al in (starts, other)])
    check("label rows past the end are invalid", valid, want)

    # 3. Simulated acceptance where the truth is the reference's drafts.
    good = prompt + [int(block[0])] + ref["draft_tokens"].tolist()
    bad = list(good)
    bad[c + 4] = (bad[c + 4] + 1) % head.shape[0]                                # row 4 wrong: 3 drafts accepted
    toks = torch.tensor([good, bad])
    f3 = tap_features(target, toks, draft.taps)
    a3 = torch.tensor([[c], [c]])
    pred = dm.block_predictions(draft, f3, toks, a3, embed, head, True)
    labels, valid = dm.block_labels(toks, a3, draft.block_size)
    check("accepted lengths at anchor 24 (expect 8 and 4)", dm.accepted_lengths(pred, labels, valid)[:, 0], torch.tensor([8, 4]))

    # Save and load, sharded.
    with tempfile.TemporaryDirectory() as tmp:
        dm.save_draft(draft, Path(tmp), dtype=torch.float32, max_shard_bytes=64 << 10)
        shards = len(list(Path(tmp).glob("model-*.safetensors")))
        back = dm.load_draft(Path(tmp)).double()
        same = all(torch.equal(v, back.state_dict()[k]) for k, v in draft.state_dict().items())
        report("save/load sharded", same and shards > 1, f"{shards} shards, {'identical' if same else 'differs'}")


def check_hand_cases(target_cfg: dict) -> None:
    print("hand-computed cases:")
    # One block of 3 rows, vocabulary 2, gamma 1: row 1 uniform (CE ln 2), row 2
    # puts 1/4 of its mass on the label (CE ln 4); weights 1 and e^-1.
    logits = torch.tensor([[[[9.0, 0.0], [0.0, 0.0], [math.log(3.0), 0.0]]]])
    tokens = torch.tensor([[1, 0, 1]])
    labels, valid = dm.block_labels(tokens, torch.tensor([[0]]), 3)
    loss, acc = dm.dflash_loss(logits, labels, valid, dm.position_weights(3, "cpu", gamma=1.0))
    w2 = math.exp(-1.0)
    check("dflash_loss = sum w*CE / sum w, w = exp(-(k-1)/gamma)", loss, (math.log(2) + w2 * math.log(4)) / (1 + w2), 1e-6)
    check("dflash_loss row accuracy", acc, torch.tensor([0.0, 1.0, 0.0]), 0.0)
    labels, valid = dm.block_labels(tokens, torch.tensor([[1]]), 3)             # row 2 runs past T = 3
    loss, _ = dm.dflash_loss(logits, labels, valid, dm.position_weights(3, "cpu", gamma=1.0))
    check("dflash_loss leaves out rows past the end", loss, math.log(2.0), 1e-6)
    check("published gamma 4 for block 8", dm.position_weights(8, "cpu")[2], math.exp(-1 / 4), 1e-7)

    # spec/dflash2.md §2.3: H 2, one group, Kc 2, zero dynamic kernel, base taps 1 and 10.
    conv = dm.DynamicConv(hidden=2, kernel=2, group=2)
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    out = conv._conv(x, torch.zeros(3, 2, 1), torch.tensor([[1.0, 1.0], [10.0, 10.0]]))
    check("convolution worked example", out, torch.tensor([[1.0, 2.0], [13.0, 24.0], [35.0, 46.0]]), 0.0)

    # A fresh DFlash2 draft computes what its DFlash backbone computes, and its
    # selector (successor codebook 0) picks the argmax.
    torch.manual_seed(1)
    kw = dict(num_layers=2, block_size=8, mask_token_id=510, intermediate_size=96, taps=[0, 2], selector_rank=8, top_k=4)
    d1 = dm.DraftModel(dm.make_draft_config(target_cfg, "dflash", **kw)).double()
    with torch.no_grad():
        for name, p in d1.named_parameters():
            p.copy_(torch.randn_like(p) * 0.2 + 1.0 if name.endswith("norm.weight") else torch.randn_like(p) / math.sqrt(p.shape[-1]))
    d2 = dm.DraftModel(dm.make_draft_config(target_cfg, "dflash2", **kw)).double()
    missing, unexpected = d2.load_state_dict(d1.state_dict(), strict=False)
    assert not unexpected and all("conv" in m or "candidate_selector" in m for m in missing)
    g = torch.Generator().manual_seed(2)
    emb = torch.nn.Embedding(512, 64).double()
    feats = torch.randn(20, 128, generator=g, dtype=torch.float64)
    block = torch.tensor([7] + [510] * 7)
    h1, l1, _ = one_block(d1, feats, block, emb, emb.weight)
    h2, l2, _ = one_block(d2, feats, block, emb, emb.weight)
    check("fresh DFlash2 == its DFlash backbone (identity convolutions)", h2, h1, 1e-12)
    check("fresh selector path == argmax", drafted(d2, h2, l2, 7), l1.argmax(-1))

    # make_draft_config refuses taps specula would reject: z-lab's default rule
    # gives [1, 1] for a 4-layer target and 2 draft layers.
    try:
        dm.make_draft_config(target_cfg, "dflash", **dict(kw, taps=None))
        report("make_draft_config rejects repeated default taps", False, "accepted [1, 1]")
    except ValueError as err:
        report("make_draft_config rejects repeated default taps", True, str(err))

    # Selector loss, one row, successor codebook 0: plain CE over the 4 candidates' logits.
    lg = torch.full((1, 1, 2, 512), -50.0, dtype=torch.float64)
    lg[0, 0, 1, [3, 9, 11, 12]] = torch.tensor([1.0, 2.0, 0.0, 0.5], dtype=torch.float64)
    hid = torch.randn(1, 1, 2, 64, dtype=torch.float64)
    w = dm.position_weights(2, "cpu")
    for truth, want, recall in ((3, -torch.log_softmax(torch.tensor([1.0, 2.0, 0.0, 0.5]), 0)[0].item(), 1.0), (100, 0.0, 0.0)):
        toks = torch.tensor([[7, truth]])
        labels, valid = dm.block_labels(toks, torch.tensor([[0]]), 2)
        blocks = dm.make_blocks(toks, torch.tensor([[0]]), 2, 510)
        sl, rc = dm.selector_loss(d2, hid, lg, labels, valid, blocks, w)
        what = "truth among the candidates" if recall else "truth not a candidate: row excluded"
        check(f"selector_loss, {what}", sl, want, 1e-6)
        check(f"selector recall, {what}", rc, recall, 0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=Path(__file__).resolve().parent.parent / "testdata" / "fixtures")
    args = ap.parse_args()
    from safetensors.torch import load_file
    from transformers import Qwen3_5ForCausalLM

    torch.set_num_threads(min(2, torch.get_num_threads()))
    tdir = args.fixtures / "qwen35-tiny"
    tref = load_file(str(tdir / "reference.safetensors"))
    prompt, greedy = tref["prompt_ids"].tolist(), tref["greedy_ids"].tolist()
    # float64 like the reference (transformers keeps its norms and RoPE tables in float32).
    target = Qwen3_5ForCausalLM.from_pretrained(tdir, dtype=torch.float32).double().eval()
    print("qwen35-tiny:")
    with torch.no_grad():
        check("target logits (transformers)", target(input_ids=torch.tensor([prompt])).logits[0], tref["logits"])
    for name in ("dflash-tiny", "dflash2-tiny"):
        check_fixture(args.fixtures / name, target, prompt, greedy)
    check_hand_cases(json.loads((tdir / "config.json").read_text()))
    if failures:
        print(f"FAILED: {len(failures)} check(s): {', '.join(failures)}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
