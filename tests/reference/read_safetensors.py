#!/usr/bin/env python3
"""Independent reader of safetensors files (reference for minitrain's ckpt/safetensors.c).

Parses the file with the standard library and numpy only (json + np.frombuffer), validates the
layout the way the public spec requires, and prints one line per tensor, in header order:

    <name> [d0,d1,...] <sum as float64 repr>

BF16 is decoded by hand (the 16 bits are the top half of an IEEE float32). When the `safetensors`
package is importable, its numpy loader is cross-checked against ours; when `torch` is importable,
every tensor is rebuilt with torch.frombuffer (torch has native BF16/F16) and the sums compared.
Exit status: 0 on success, 1 on a malformed file or a cross-check mismatch.

Usage: /usr/bin/python3 tests/reference/read_safetensors.py FILE
"""
import json
import struct
import sys

import numpy as np

NP_DTYPES = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
    "F16": np.float16, "I32": np.int32, "U32": np.uint32, "F32": np.float32, "F64": np.float64,
    "I64": np.int64, "U64": np.uint64, "BF16": np.uint16,  # BF16 converted below
}
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4,
         "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def fail(path, msg):
    print(f"{path}: {msg}", file=sys.stderr)
    sys.exit(1)


def load(path):
    """Return (metadata, [(name, dtype, shape, np.ndarray as float64-capable values)])."""
    try:
        with open(path, "rb") as fh:
            blob = fh.read()
    except OSError as e:
        fail(path, f"cannot read: {e.strerror}")
    if len(blob) < 8:
        fail(path, "shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        fail(path, f"header length {n} beyond the file")
    raw = blob[8:8 + n]
    if (8 + n) % 8 != 0:
        print(f"{path}: note: header not padded to 8 bytes", file=sys.stderr)
    try:
        header = json.loads(raw.decode("utf-8"))  # json allows the trailing space padding
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(path, f"header is not valid UTF-8 JSON: {e}")
    buf = memoryview(blob)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    tensors, spans = [], []
    for name, info in header.items():  # dicts keep the file's key order
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != numel * SIZES[dtype] or end > len(buf):
            fail(path, f"tensor {name}: bad data_offsets {begin},{end}")
        arr = np.frombuffer(buf[begin:end], dtype=np.dtype(NP_DTYPES[dtype]).newbyteorder("<"))
        if dtype == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        tensors.append((name, dtype, shape, arr.reshape(shape)))
        spans.append((begin, end))
    pos = 0
    for begin, end in sorted(spans):
        if begin != pos:
            fail(path, "tensors overlap or leave a gap")
        pos = end
    if pos != len(buf):
        fail(path, f"tensors cover {pos} bytes, buffer has {len(buf)}")
    return meta, tensors


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    path = sys.argv[1]
    meta, tensors = load(path)
    sums = {}
    for name, dtype, shape, arr in tensors:
        s = float(arr.astype(np.float64).sum())
        sums[name] = s
        print(f"{name} [{','.join(str(d) for d in shape)}] {s!r}")
    bad = 0
    try:
        from safetensors.numpy import load_file  # optional
        ref = load_file(path)
        for name, dtype, shape, arr in tensors:
            if dtype == "BF16":
                continue  # numpy has no bfloat16; covered by the torch check
            if not np.array_equal(ref[name], arr):
                print(f"{path}: safetensors disagrees on {name}", file=sys.stderr)
                bad = 1
        print(f"# cross-checked with safetensors", file=sys.stderr)
    except ImportError:
        pass
    try:
        import torch  # optional; torch 1.13 has no safetensors loader, so decode bytes natively
        tdt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
               "I32": torch.int32, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
               "F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool}
        with open(path, "rb") as fh:
            blob = bytearray(fh.read())
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n].decode("utf-8"))
        for name, dtype, shape, _ in tensors:
            if dtype not in tdt:
                continue
            begin, end = header[name]["data_offsets"]
            chunk = blob[8 + n + begin:8 + n + end]
            t = (torch.frombuffer(chunk, dtype=tdt[dtype]) if end > begin
                 else torch.zeros(0, dtype=tdt[dtype])).reshape(shape)
            s = float(t.to(torch.float64).sum())
            if s != sums[name] and abs(s - sums[name]) > 1e-9 * max(1.0, abs(s)):
                print(f"{path}: torch sum {s!r} != numpy sum {sums[name]!r} for {name}",
                      file=sys.stderr)
                bad = 1
        print("# cross-checked with torch " + torch.__version__, file=sys.stderr)
    except ImportError:
        pass
    for k, v in meta.items():
        if not isinstance(v, str):
            fail(path, f"metadata {k} is not a string")
    return bad


if __name__ == "__main__":
    sys.exit(main())
