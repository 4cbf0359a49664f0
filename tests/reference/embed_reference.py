#!/usr/bin/python3
"""tests/reference/embed_reference.py — check `minitrain serve`'s POST /v1/embeddings answer
against PyTorch.

Reads the served model.safetensors by hand (ckpt_loss.parse: json + np.frombuffer), runs
gpt_reference.hidden (the PyTorch GPT the C code is tested against) on each input's token ids,
takes the mean over tokens and L2-normalises it, and compares with the answer's vectors (float
arrays, or base64 of little-endian float32 when the answer is base64). Prints the largest
absolute difference; exit 1 above 1e-4 (float32 decode vs a float32 PyTorch forward) or when the
answer's shape, indices or usage.prompt_tokens are not what the inputs imply.

Usage: /usr/bin/python3 tests/reference/embed_reference.py MODEL.safetensors ANSWER.json IDS.json
  IDS.json: the inputs as token ids, [[id, ...], ...], in the order of the request's inputs.
"""
import base64
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_loss import parse  # noqa: E402  (the hand-written safetensors reader)
from gpt_reference import hidden  # noqa: E402


def load(path):
    meta, tensors = parse(path)
    P = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
    return P, json.loads(meta["minitrain.model"])


def main():
    P, meta = load(sys.argv[1])
    answer = json.load(open(sys.argv[2]))
    inputs = json.load(open(sys.argv[3]))
    data = answer["data"]
    assert answer["object"] == "list" and len(data) == len(inputs), "wrong number of embeddings"
    assert answer["usage"]["prompt_tokens"] == sum(len(i) for i in inputs), "wrong usage"
    worst = 0.0
    for i, ids in enumerate(inputs):
        assert data[i]["index"] == i and data[i]["object"] == "embedding"
        e = data[i]["embedding"]
        got = (np.frombuffer(base64.b64decode(e), dtype="<f4") if isinstance(e, str)
               else np.array(e, dtype=np.float64))
        with torch.no_grad():
            h = hidden(P, torch.tensor([ids]), meta["n_layer"], meta["n_head"], meta["d_model"])
        v = h[0].double().mean(0)
        v = (v / v.norm()).numpy()
        assert got.shape == v.shape, f"embedding {i}: shape {got.shape}, want {v.shape}"
        worst = max(worst, float(np.abs(got - v).max()))
    print(f"max abs diff {worst:.3g}")
    sys.exit(0 if worst < 1e-4 else 1)


main()
