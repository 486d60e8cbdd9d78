"""Copying baselines for judging a draft: loop detection and prompt lookup.

A tiny target's greedy continuation often ends in an exact loop, and then
copying earlier text (prompt lookup, the ngram plugin) predicts it better than
any draft. Acceptance is therefore reported separately for continuations that
loop and those that do not, beside prompt lookup's on the same positions.
"""

from __future__ import annotations

import numpy as np


def ends_in_loop(seq, tail: int = 64, max_period: int = 32) -> bool:
    """Whether the last `tail` tokens repeat with some period <= max_period."""
    seq = list(seq)
    if len(seq) < tail:
        return False
    t = seq[-tail:]
    return any(all(t[i] == t[i - p] for i in range(p, tail)) for p in range(1, max_period + 1))


def lookup_proposal(seq, end: int, depth: int, max_ngram: int = 3) -> list[int]:
    """Prompt lookup at seq[:end]: find the latest earlier occurrence of the
    last n tokens (n = max_ngram down to 1) and propose what followed it."""
    for n in range(max_ngram, 0, -1):
        if end < n + 1:
            continue
        key = seq[end - n:end]
        for s in range(end - n - 1, -1, -1):
            if seq[s:s + n] == key:
                follow = seq[s + n:min(s + n + depth, end)]
                if follow:
                    return list(follow)
                break
    return []


def lookup_acceptance(seqs: np.ndarray, prompt_len: int, depth: int) -> np.ndarray:
    """Accepted length (1 + leading matches) at every continuation position, as
    verification against the sequence itself would count it: [N, positions]."""
    out = np.zeros((len(seqs), seqs.shape[1] - prompt_len), dtype=np.int64)
    for r, row in enumerate(seqs):
        seq = [int(t) for t in row]
        for j, end in enumerate(range(prompt_len, len(seq))):
            proposal = lookup_proposal(seq, end, depth)
            n = 0
            while n < len(proposal) and end + n < len(seq) and proposal[n] == seq[end + n]:
                n += 1
            out[r, j] = 1 + n
    return out
