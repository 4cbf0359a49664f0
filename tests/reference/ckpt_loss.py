#!/usr/bin/python3
"""tests/reference/ckpt_loss.py — load a minitrain checkpoint with numpy/PyTorch only and
recompute the validation loss that minitrain's `trainer_eval` reports for it.

The checkpoint directory (RUN_DIR/ckpt/step_N) is read without minitrain: trainer_state.json for
the model shape and eval settings, every model-*.safetensors file parsed by hand (json +
np.frombuffer, as tests/reference/read_safetensors.py), each tensor placed into its global array
from its "shard:<name>" metadata (global shape + offset), so a tensor-parallel checkpoint is
assembled here independently of minitrain's reader. The qkv tensors are stored in the logical
(3, C, C) / (3, C) view and reshaped to (3C, C) / (3C). The forward is gpt_reference.forward (the
PyTorch model the C code is tested against). Validation windows follow text/data.h: the val
shards concatenated, window w = tokens[w*T : w*T + T + 1], batch i = windows i*B .. i*B+B-1.

With --export FILE (from `minitrain ckpt export`) it also checks the Hugging Face export: every
tensor equals the checkpoint's (Conv1D weights transposed to (in, out)), config.json carries the
GPT2Config keys of this model, and the loss computed from the export is the same.

Prints "loss <value>" (and "export ok"). Exit 1 on a malformed file or a failed check.
Usage: /usr/bin/python3 tests/reference/ckpt_loss.py STEP_DIR DATA_DIR [--export FILE]
"""
import glob
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import forward  # noqa: E402


def parse(path):
    """(metadata, {name: ndarray}) of a safetensors file (F32/I32 only)."""
    with open(path, "rb") as fh:
        blob = fh.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = {"F32": "<f4", "I32": "<i4"}[info["dtype"]]
        out[name] = np.frombuffer(blob[8 + n + b:8 + n + e], dtype=dt).reshape(info["shape"])
    return meta, out


def parse_shard(value):
    """'global=[a,b];offset=[c,d]' -> ([a, b], [c, d])."""
    g, o = value.split(";")
    assert g.startswith("global=[") and o.startswith("offset=["), value
    to_list = lambda s: [int(x) for x in s[s.index("[") + 1:-1].split(",") if x.strip()]
    return to_list(g), to_list(o)


def assemble(step_dir, prefix="model-"):
    """Global tensors from every <prefix>*.safetensors piece; checks full coverage."""
    tensors, covered = {}, {}
    files = sorted(glob.glob(os.path.join(step_dir, prefix + "*.safetensors")))
    if not files:
        sys.exit(f"{step_dir}: no {prefix}*.safetensors files")
    for path in files:
        meta, arrs = parse(path)
        for name, arr in arrs.items():
            spec = meta.get("shard:" + name)
            gshape, off = parse_shard(spec) if spec else (list(arr.shape), [0] * arr.ndim)
            if name not in tensors:
                tensors[name] = np.zeros(gshape, dtype=np.float32)
                covered[name] = np.zeros(gshape, dtype=bool)
            box = tuple(slice(o, o + s) for o, s in zip(off, arr.shape))
            tensors[name][box] = arr
            covered[name][box] = True
    for name, cov in covered.items():
        if not cov.all():
            sys.exit(f"{step_dir}: tensor {name} not fully covered by the shard files")
    return tensors


def val_windows(data_dir, T):
    toks = []
    for path in sorted(glob.glob(os.path.join(data_dir, "val_*.bin"))):
        with open(path, "rb") as fh:
            blob = fh.read()
        hdr = np.frombuffer(blob[:1024], dtype="<i4")
        assert hdr[0] == 20240520, f"{path}: bad magic"
        dt = "<u2" if hdr[1] == 1 else "<u4"
        toks.append(np.frombuffer(blob[1024:], dtype=dt)[:hdr[2]].astype(np.int64))
    toks = np.concatenate(toks)
    nwin = (len(toks) - 1) // T
    return toks, nwin


def eval_loss(P, cfg, toks, nwin, B, batches):
    L, NH, C, T = cfg["n_layer"], cfg["n_head"], cfg["d_model"], cfg["seq_len"]
    bsz = min(B, nwin)
    if batches * B > nwin:
        batches = max(nwin // B, 1)
    total = 0.0
    with torch.no_grad():
        for i in range(batches):
            w = np.arange(i * bsz, i * bsz + bsz) % nwin
            idx = np.stack([toks[k * T:k * T + T] for k in w])
            tgt = np.stack([toks[k * T + 1:k * T + T + 1] for k in w])
            logits = forward(P, torch.from_numpy(idx), L, NH, C)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   torch.from_numpy(tgt).reshape(-1))
            total += loss.item()
    return total / batches


def main():
    args = sys.argv[1:]
    export = None
    if "--export" in args:
        i = args.index("--export")
        export = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    step_dir, data_dir = args
    torch.set_num_threads(1)
    with open(os.path.join(step_dir, "trainer_state.json")) as fh:
        state = json.load(fh)
    cfg, run_cfg = state["model"], state["config"]
    C = cfg["d_model"]
    g = assemble(step_dir)
    P = {}
    for name, arr in g.items():
        if "attn.c_attn." in name:  # logical (3, C, C) / (3, C) -> (3C, C) / (3C)
            arr = arr.reshape(3 * C, -1) if arr.ndim == 3 else arr.reshape(3 * C)
        P[name] = torch.from_numpy(np.array(arr, dtype=np.float32))
    toks, nwin = val_windows(data_dir, cfg["seq_len"])
    loss = eval_loss(P, cfg, toks, nwin, run_cfg["batch_size"], run_cfg["eval_batches"])
    print(f"loss {loss!r}")
    # optimizer state parses and covers the same tensors
    opt = assemble(step_dir, "optim-")
    for name in g:
        for k in ("optim.m.", "optim.v."):
            if opt[k + name].shape != g[name].shape:
                sys.exit(f"{step_dir}: {k}{name} shape {opt[k + name].shape} != {g[name].shape}")
    if export:
        meta, hf = parse(export)
        conv1d = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight",
                  ".mlp.c_proj.weight")
        if set(hf) != set(P):
            sys.exit(f"{export}: tensor names differ: {sorted(set(hf) ^ set(P))[:5]}")
        back = {}
        for name, arr in hf.items():
            mine = P[name].numpy()
            if name.endswith(conv1d):
                if arr.shape != mine.T.shape or not np.array_equal(arr, mine.T):
                    sys.exit(f"{export}: {name} is not the transposed (in, out) weight")
                arr = arr.T
            elif arr.shape != mine.shape or not np.array_equal(arr, mine):
                sys.exit(f"{export}: {name} differs from the checkpoint")
            back[name] = torch.from_numpy(np.array(arr, dtype=np.float32))
        with open(os.path.join(os.path.dirname(export), "config.json")) as fh:
            hc = json.load(fh)
        want = {"model_type": "gpt2", "n_layer": cfg["n_layer"], "n_head": cfg["n_head"],
                "n_embd": C, "n_positions": cfg["seq_len"], "vocab_size": cfg["vocab_size"]}
        for k, v in want.items():
            if hc.get(k) != v:
                sys.exit(f"config.json: {k} = {hc.get(k)!r}, expected {v!r}")
        loss2 = eval_loss(back, cfg, toks, nwin, run_cfg["batch_size"], run_cfg["eval_batches"])
        if loss2 != loss:
            sys.exit(f"{export}: loss {loss2!r} != checkpoint loss {loss!r}")
        print("export ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
