"""Identifier renaming: Go source whose names the target has never seen.

A small target trained on one corpus memorises that corpus's names. On code
from elsewhere its greedy continuations copy names from the prompt instead
(a loop over a renamed field, a call of a function declared above), and a draft
trained only on continuations of corpus prompts never learned to predict such
copies. Renaming a share of each document's identifiers, consistently within
the document, makes corpus prompts that look like outside code: the same
syntax and idioms, unfamiliar names. New names are built from the pieces of the
corpus's own identifiers (`read`, `Header`, `buf`, ...), so the tokenizer
splits them the way it splits real names, and keep what Go reads from a
name's spelling: exported (upper-case first letter) or not, all capitals.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

# Spelled by the language or predeclared: renaming them would change what the
# code means, not just what it calls things.
GO_RESERVED = frozenset("""
break case chan const continue default defer else fallthrough for func go goto if import
interface map package range return select struct switch type var
any bool byte comparable complex64 complex128 error float32 float64 int int8 int16 int32
int64 rune string uint uint8 uint16 uint32 uint64 uintptr true false iota nil append cap
clear close complex copy delete imag len make max min new panic print println real recover
""".split())

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Comments, then interpreted, raw and rune literals: what is not code.
NOT_CODE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|`[^`]*`|'(?:\\.|[^'\\\n])*'", re.S)
CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def code_identifiers(text: str) -> set[str]:
    """Identifiers that occur in code (outside comments and literals)."""
    return set(IDENT.findall(NOT_CODE.sub(" ", text)))


def pieces(texts, limit: int = 4000) -> list[str]:
    """The commonest lower-case pieces of the code identifiers in texts, ties
    in alphabetical order. (Counting in a set's order and keeping most_common's
    order of ties made the list, and with it every renamed prompt, depend on
    the process's string-hash seed.)"""
    count = Counter()
    for text in texts:
        for name in code_identifiers(text):
            for piece in CAMEL.findall(name):
                if piece.isalpha() and 2 <= len(piece) <= 10:
                    count[piece.lower()] += 1
    return [p for p, _ in sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]


class Renamer:
    """Renames a share of a document's code identifiers to fresh names."""

    def __init__(self, vocabulary: list[str], share: float, rng: np.random.Generator):
        if not vocabulary:
            raise ValueError("rename: no identifier pieces to build names from")
        if not 0 < share <= 1:
            raise ValueError(f"rename: share {share} must be in (0, 1]")
        self.vocabulary = vocabulary
        self.share = share
        self.rng = rng

    def fresh(self, old: str, taken: set[str]) -> str:
        """A name of 1-3 pieces with old's shape, not in taken."""
        for _ in range(100):
            n = int(self.rng.integers(1, 4))
            parts = [self.vocabulary[int(i)] for i in self.rng.integers(0, len(self.vocabulary), size=n)]
            if old.isupper() and len(old) > 1:
                name = "".join(parts).upper()
            else:
                name = parts[0] + "".join(p.capitalize() for p in parts[1:])
                if old[0].isupper():
                    name = name[0].upper() + name[1:]
                elif old[0] == "_":
                    name = "_" + name
            if name not in taken and name not in GO_RESERVED:
                return name
        raise RuntimeError(f"rename: no fresh name for {old!r} after 100 tries")

    def __call__(self, text: str) -> str:
        names = sorted(n for n in code_identifiers(text) if n not in GO_RESERVED and len(n) > 1 and n != "_")
        if not names:
            return text
        chosen = [n for n in names if self.rng.random() < self.share]
        taken = set(IDENT.findall(text))
        mapping = {}
        for old in chosen:
            new = self.fresh(old, taken)
            taken.add(new)
            mapping[old] = new
        return IDENT.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)
