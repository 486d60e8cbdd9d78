#!/usr/bin/env python3
"""pprof-cgo.py: the C and C++ frames of a Go CPU profile, named.

A binary built with `-tags cgotraceback` (mlx/cgotraceback.go) records the
C/C++ frames under each cgo call in its --cpuprofile, as bare addresses in
the shared libraries the profile's mappings name; `go tool pprof` leaves
them unnamed. This script names them with addr2line and prints the
functions by flat and cumulative time, optionally only for samples whose
stack holds a given function (--focus, a regular expression, e.g.
spx_async_eval for MLX's submission, or a Go function of the round).

    scripts/pprof-cgo.py PROFILE [--focus REGEX] [--ignore REGEX] [--top N] [--libdir DIR ...]

--libdir: folders to look for a mapping's file by its base name, where the
profile was taken on another machine (its paths do not exist here).
Needs: go (go tool pprof -raw), addr2line and readelf (binutils).
"""
import argparse
import collections
import functools
import os
import re
import subprocess
import sys


def parse_raw(text):
    samples, locations, mappings = [], {}, {}
    section = None
    current = None
    for line in text.splitlines():
        if line.startswith("Samples:"):
            section = "samples"
            continue
        if line.startswith("Locations"):
            section = "locations"
            continue
        if line.startswith("Mappings"):
            section = "mappings"
            continue
        if section == "samples":
            m = re.match(r"\s*(\d+)\s+(\d+):\s*(.*)$", line)
            if m:
                ids = [int(x) for x in m.group(3).split()]
                samples.append((int(m.group(2)), ids))
        elif section == "locations":
            m = re.match(r"\s*(\d+):\s+(0x[0-9a-f]+)(?:\s+M=(\d+))?\s*(.*)$", line)
            if m:
                current = int(m.group(1))
                rest = m.group(4).strip()
                # An unnamed frame reads " :0:0 s=0".
                name = "" if rest.startswith(":") else rest.split(" ")[0]
                locations[current] = {"addr": int(m.group(2), 16), "map": int(m.group(3) or 0), "funcs": [name] if name else []}
            elif current is not None and line.strip():
                # An inlined frame of the same location, innermost first.
                locations[current]["funcs"].append(line.strip().split(" ")[0])
        elif section == "mappings":
            m = re.match(r"\s*(\d+):\s+(0x[0-9a-f]+)/(0x[0-9a-f]+)/(0x[0-9a-f]+)\s+(\S+)\s*([0-9a-f]*)", line)
            if m:
                mappings[int(m.group(1))] = {"start": int(m.group(2), 16), "offset": int(m.group(4), 16), "file": m.group(5), "build_id": m.group(6)}
    return samples, locations, mappings


@functools.lru_cache(maxsize=None)
def load_segments(path):
    """(p_offset, p_vaddr, p_filesz) of each LOAD segment, and whether the file is position-independent."""
    out = subprocess.run(["readelf", "-lhW", path], capture_output=True, text=True).stdout
    pie = "DYN" in (re.search(r"Type:\s+(\S+)", out) or [None, ""])[1]
    segs = []
    for m in re.finditer(r"^\s*LOAD\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+\S+\s+(0x[0-9a-f]+)", out, re.M):
        segs.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)))
    return segs, pie


@functools.lru_cache(maxsize=None)
def build_id(path):
    out = subprocess.run(["readelf", "-nW", path], capture_output=True, text=True).stdout
    m = re.search(r"Build ID:\s*([0-9a-f]+)", out)
    return m.group(1) if m else ""


@functools.lru_cache(maxsize=None)
def find_file(path, want, libdirs):
    """The file of a mapping: its own path, else one of that base name in a
    libdir; with the same build ID, when the profile records one (a
    machine's libc here is not the profiled machine's)."""
    for p in [path] + [os.path.join(d, os.path.basename(path)) for d in libdirs]:
        if os.path.exists(p) and (not want or build_id(p) == want):
            return p
    return None


def symbolize(locations, mappings, libdirs):
    by_file = collections.defaultdict(list)
    for lid, loc in locations.items():
        if loc["funcs"]:
            continue
        mp = mappings.get(loc["map"])
        if not mp:
            continue
        path = find_file(mp["file"], mp["build_id"], libdirs)
        if not path:
            # Not here (another machine's library): its name at least.
            loc["funcs"] = [f"[{os.path.basename(mp['file'])}]"]
            continue
        segs, pie = load_segments(path)
        if pie:
            fileoff = loc["addr"] - mp["start"] + mp["offset"]
            vaddr = None
            for off, va, size in segs:
                if off <= fileoff < off + size:
                    vaddr = fileoff - off + va
            if vaddr is None:
                continue
        else:
            vaddr = loc["addr"]
        # Return addresses: name the call instruction, one byte back.
        by_file[path].append((lid, max(vaddr - 1, 0)))
    for path, items in by_file.items():
        inp = "\n".join(hex(a) for _, a in items) + "\n"
        out = subprocess.run(["addr2line", "-f", "-C", "-e", path], input=inp, capture_output=True, text=True).stdout.splitlines()
        for i, (lid, _) in enumerate(items):
            name = out[2 * i] if 2 * i < len(out) else "??"
            if name == "??":
                name = f"[{os.path.basename(path)}+{hex(items[i][1])}]"
            locations[lid]["funcs"] = [name]


def short(name, width=110):
    # Drop argument lists and template arguments for a readable table.
    depth, out = 0, []
    for ch in name:
        if ch in "(<":
            depth += 1
            if depth == 1:
                out.append("()" if ch == "(" else "<>")
            continue
        if ch in ")>":
            depth = max(depth - 1, 0)
            continue
        if depth == 0:
            out.append(ch)
    s = "".join(out)
    return s if len(s) <= width else s[: width - 1] + "…"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--focus", help="only samples whose stack holds a function matching this regular expression")
    ap.add_argument("--ignore", help="leave out samples whose stack holds a function matching this regular expression")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--libdir", action="append", default=[])
    args = ap.parse_args()
    raw = subprocess.run(["go", "tool", "pprof", "-raw", args.profile], capture_output=True, text=True)
    if raw.returncode != 0:
        sys.exit(raw.stderr)
    samples, locations, mappings = parse_raw(raw.stdout)
    symbolize(locations, mappings, tuple(args.libdir))
    focus = re.compile(args.focus) if args.focus else None
    ignore = re.compile(args.ignore) if args.ignore else None
    flat, cum = collections.Counter(), collections.Counter()
    total = 0
    for value, ids in samples:
        stack = [short(f) for lid in ids for f in locations.get(lid, {}).get("funcs", ["?"]) or ["?"]]
        if focus and not any(focus.search(f) for f in stack):
            continue
        if ignore and any(ignore.search(f) for f in stack):
            continue
        total += value
        flat[stack[0] if stack else "?"] += value
        for f in set(stack):
            cum[f] += value
    print(f"total {total / 1e9:.2f} s of samples" + (f" with {args.focus} on the stack" if focus else ""))
    print(f"{'flat s':>8} {'flat%':>6} {'cum s':>8} {'cum%':>6}  function")
    for f, v in cum.most_common(args.top):
        print(f"{flat[f] / 1e9:8.2f} {100 * flat[f] / max(total, 1):6.1f} {v / 1e9:8.2f} {100 * v / max(total, 1):6.1f}  {f}")
    print("\nby flat time:")
    for f, v in flat.most_common(args.top // 2):
        print(f"{v / 1e9:8.2f} {100 * v / max(total, 1):6.1f}  {f}")


if __name__ == "__main__":
    main()
