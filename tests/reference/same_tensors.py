#!/usr/bin/python3
"""tests/reference/same_tensors.py — do two safetensors files hold the same tensors, bit for bit?

usage: same_tensors.py FILE_A FILE_B

Reads both files with the standard library only (the 8-byte little-endian header length, the JSON
header, the raw bytes at each tensor's data_offsets), so it is independent of ckpt/safetensors.c.
Equal means: the same tensor names, and for each the same shape and the same bytes (no tolerance:
a resumed or re-laid-out run that must be exact is held to exactly), and at least one tensor.
Exit status 0 when equal; 1 with one line on stderr naming what differs.
"""
import json
import struct
import sys


def tensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["shape"], blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2])
    a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
    if not a:
        sys.exit("no tensors in " + sys.argv[1])
    if a.keys() != b.keys():
        sys.exit("tensor names differ: " + ", ".join(sorted(a.keys() ^ b.keys())[:5]))
    diff = [k for k in a if a[k] != b[k]]
    if diff:
        sys.exit("tensors differ: " + ", ".join(diff[:5]))


if __name__ == "__main__":
    main()
