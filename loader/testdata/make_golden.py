#!/usr/bin/env python3
"""Golden safetensors files for package loader, written by the reference crate.

Run from anywhere (needs `pip install safetensors`; made with safetensors 0.8.0):

    python3 loader/testdata/make_golden.py
        (re)writes loader/testdata/golden/*.safetensors and golden/golden.json,
        the manifest that describes each file's input (names, dtypes, shapes,
        data as hex, metadata). The Go tests read the files with our reader and
        rebuild them byte for byte with our writer from the manifest.

    python3 loader/testdata/make_golden.py --check DIR
        reads the files our writer produced in DIR (described by DIR/manifest.json,
        same format) with the crate, checks every tensor and the metadata, and,
        where the crate can write the same input deterministically, that its bytes
        equal ours. Make DIR with
        go test ./loader -run TestWriterRoundTripDir -roundtrip-dir=DIR

The crate's Python API writes through TensorSpec, which takes numpy-style dtype
names and, for F4, the packed storage shape (it doubles the last dimension). It
cannot write the F6 dtypes at all, and its metadata order follows a hash map,
so files with two or more metadata keys are not byte-reproducible; those cases
are only checked by reading.
"""

import ctypes
import json
import os
import sys

import safetensors
from safetensors import TensorSpec, deserialize, safe_open, serialize

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden")

# safetensors dtype -> (TensorSpec dtype name, bits); None where the crate's
# Python API has no name for it.
DTYPES = {
    "BOOL": ("bool", 8), "F4": ("float4_e2m1fn_x2", 4), "F6_E2M3": (None, 6),
    "F6_E3M2": (None, 6), "U8": ("uint8", 8), "I8": ("int8", 8),
    "F8_E5M2": ("float8_e5m2", 8), "F8_E4M3": ("float8_e4m3fn", 8),
    "F8_E8M0": ("float8_e8m0fnu", 8), "F8_E4M3FNUZ": ("float8_e4m3fnuz", 8),
    "F8_E5M2FNUZ": ("float8_e5m2fnuz", 8), "I16": ("int16", 16), "U16": ("uint16", 16),
    "F16": ("float16", 16), "BF16": ("bfloat16", 16), "I32": ("int32", 32),
    "U32": ("uint32", 32), "F32": ("float32", 32), "C64": ("complex64", 64),
    "F64": ("float64", 64), "I64": ("int64", 64), "U64": ("uint64", 64),
}


def data_for(seed, dtype, shape):
    """Deterministic bytes for a tensor: elements*bits/8 of them."""
    n = 1
    for d in shape:
        n *= d
    size = n * DTYPES[dtype][1] // 8
    return bytes((seed * 37 + i * 11 + 1) % 256 for i in range(size))


def case(file, tensors, metadata=None):
    ts = [
        {"name": name, "dtype": dtype, "shape": list(shape),
         "data": data_for(k + 1, dtype, shape).hex()}
        for k, (name, dtype, shape) in enumerate(tensors)
    ]
    return {"file": file, "metadata": metadata, "tensors": ts}


CASES = [
    case("empty.safetensors", []),
    case("metadata_only.safetensors", [], {"format": "pt"}),
    # Every dtype the crate's Python API can write, one tensor each, with
    # names that do not follow dtype order, so the sort is exercised.
    case("dtypes.safetensors", [
        (f"t{i:02d}_{d.lower()}", d, shape)
        for i, (d, shape) in enumerate(zip(
            ["U64", "BOOL", "F4", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
             "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32",
             "U32", "F32", "C64", "F64", "I64"],
            [[2, 3], [5], [2, 4], [3, 1], [7], [2, 2], [4], [3], [1, 1, 2], [2],
             [3, 2], [1], [2, 2], [5], [2], [3], [2, 3], [2], [1], [2]]))
    ], {"format": "pt"}),
    # Rank-0 scalars and zero-size tensors, several sharing one offset.
    case("rank0_zero.safetensors", [
        ("scalar_f32", "F32", []), ("scalar_bf16", "BF16", []),
        ("scalar_u8", "U8", []), ("empty_f32", "F32", [0]),
        ("empty_2d", "F32", [4, 0]), ("empty_i64", "I64", [0, 3]),
        ("empty_u8", "U8", [0]), ("vec", "F32", [3]),
    ]),
    # Names that need JSON escaping (quote, backslash, control characters)
    # and names serde_json leaves raw (<>&, DEL, U+2028, non-ASCII).
    case("names.safetensors", [
        ('quote"and\\backslash', "F32", [1]), ("tab\tnew\nline\x01\x1f", "F32", [1]),
        ("html<&>\u2028\x7f", "F32", [1]), ("ünïcödé.権重", "F32", [1]),
        ("", "U8", [1]), ("b", "F32", [1]), ("a", "F32", [1]), ("B", "F32", [1]),
    ], {"note": 'value with "quotes", \\ and\ncontrol\x02 <html> ü'}),
    # A single tensor with no metadata: the most common shape of a file.
    case("single.safetensors", [("model.embed_tokens.weight", "BF16", [4, 8])]),
]


def spec_for(t, keep):
    name, bits = DTYPES[t["dtype"]]
    data = bytes.fromhex(t["data"])
    buf = ctypes.create_string_buffer(data, max(len(data), 1))
    keep.append(buf)
    shape = list(t["shape"])
    if t["dtype"] == "F4":  # TensorSpec takes the packed (x2) storage shape
        shape[-1] //= 2
    return TensorSpec(dtype=name, shape=shape, data_ptr=ctypes.addressof(buf), data_len=len(data))


def crate_bytes(c):
    """The crate's serialisation of a case, or None if it cannot write it."""
    if any(DTYPES[t["dtype"]][0] is None for t in c["tensors"] or []):
        return None
    if c["metadata"] is not None and len(c["metadata"]) > 1:
        return None
    if c["metadata"] == {} and not c["tensors"]:
        return None  # the crate writes invalid JSON for this input
    keep = []
    specs = {t["name"]: spec_for(t, keep) for t in c["tensors"]}
    return bytes(serialize(specs, metadata=c["metadata"]))


def check_file(path, c):
    """Read path with the crate and compare it with case c."""
    with open(path, "rb") as f:
        raw = f.read()
    got = dict(deserialize(raw))
    want = {t["name"]: t for t in c["tensors"] or []}
    assert set(got) == set(want), (path, sorted(got), sorted(want))
    for name, t in want.items():
        g = got[name]
        assert g["dtype"] == t["dtype"], (path, name, g["dtype"], t["dtype"])
        assert list(g["shape"]) == t["shape"], (path, name, g["shape"], t["shape"])
        assert bytes(g["data"]) == bytes.fromhex(t["data"]), (path, name)
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    assert (meta or None) == (c["metadata"] or None), (path, meta, c["metadata"])
    expected = crate_bytes(c)
    if expected is not None:
        assert raw == expected, (path, raw[:200], expected[:200])
    return expected is not None


def write_golden():
    os.makedirs(GOLDEN, exist_ok=True)
    for c in CASES:
        data = crate_bytes(c)
        assert data is not None, c["file"]
        with open(os.path.join(GOLDEN, c["file"]), "wb") as f:
            f.write(data)
        check_file(os.path.join(GOLDEN, c["file"]), c)
    manifest = {"generated_by": f"safetensors {safetensors.__version__}", "cases": CASES}
    with open(os.path.join(GOLDEN, "golden.json"), "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print(f"wrote {len(CASES)} golden files to {GOLDEN} with safetensors {safetensors.__version__}")


def check_dir(d):
    with open(os.path.join(d, "manifest.json")) as f:
        cases = json.load(f)["cases"]
    for c in cases:
        same = check_file(os.path.join(d, c["file"]), c)
        print(f"ok  {c['file']}: read by the crate" + (", bytes identical to the crate's" if same else ""))
    print(f"{len(cases)} files written by loader read back correctly with safetensors {safetensors.__version__}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check_dir(sys.argv[2])
    elif len(sys.argv) == 1:
        write_golden()
    else:
        sys.exit(__doc__)
