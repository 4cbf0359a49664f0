#!/usr/bin/python3
"""tests/reference/gpt_reference.py — golden values for minitrain's GPT from PyTorch.

Builds the same GPT-2 model as model/model.c (token + position embeddings, pre-LayerNorm blocks,
causal attention over a packed (B, T, 3, NH, HS) qkv, tanh-GELU MLP, final LayerNorm, LM head
tied to wte) from seeded random weights, then writes one safetensors file per configuration with:
  - every parameter under minitrain's names (Linear weights in (out, in) layout),
  - ref.inputs / ref.targets (B, T) int32,
  - ref.logits (B, T, V), ref.loss (1), grad.<name> for every parameter,
  - ref.step_losses (10): losses of 10 AdamW steps (betas 0.9/0.95, eps 1e-8, weight decay on
    2-D tensors only, global-norm clipping at 1.0, constant lr) on the same batch,
  - final.<name>: parameters after those 10 steps,
and the configuration plus optimizer settings in __metadata__.
The C side (tests/test_reference.c) loads the weights, recomputes everything and compares.

Run with Debian's interpreter: /usr/bin/python3 tests/reference/gpt_reference.py OUT_DIR
Only numpy and torch are used; the safetensors file is written by hand from the public spec.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

CONFIGS = {
    # name: (n_layer, n_head, d_model, seq_len (= T here), vocab, batch)
    "tiny": (2, 4, 32, 16, 64, 3),
    "odd": (2, 3, 24, 11, 37, 2),  # n_head = 3, T = 11: nothing is a power of two
}
LR, WD, BETAS, EPS, CLIP, STEPS = 3e-3, 0.1, (0.9, 0.95), 1e-8, 1.0, 10


def param_specs(L, C, T, V):
    specs = [("wte.weight", (V, C)), ("wpe.weight", (T, C))]
    for l in range(L):
        p = f"h.{l}."
        specs += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
                  (p + "attn.c_attn.weight", (3 * C, C)), (p + "attn.c_attn.bias", (3 * C,)),
                  (p + "attn.c_proj.weight", (C, C)), (p + "attn.c_proj.bias", (C,)),
                  (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
                  (p + "mlp.c_fc.weight", (4 * C, C)), (p + "mlp.c_fc.bias", (4 * C,)),
                  (p + "mlp.c_proj.weight", (C, 4 * C)), (p + "mlp.c_proj.bias", (C,))]
    specs += [("ln_f.weight", (C,)), ("ln_f.bias", (C,))]
    return specs


def forward(P, idx, L, NH, C):
    return hidden(P, idx, L, NH, C) @ P["wte.weight"].T


def hidden(P, idx, L, NH, C):
    """The last hidden states (B, T, C): the final LayerNorm's output, before the LM head."""
    B, T = idx.shape
    HS = C // NH
    x = P["wte.weight"][idx] + P["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = f"h.{l}."
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], 1e-5)
        qkv = h @ P[p + "attn.c_attn.weight"].T + P[p + "attn.c_attn.bias"]
        qkv = qkv.view(B, T, 3, NH, HS)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, NH, T, HS)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ P[p + "attn.c_proj.weight"].T + P[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], 1e-5)
        h = F.gelu(h @ P[p + "mlp.c_fc.weight"].T + P[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ P[p + "mlp.c_proj.weight"].T + P[p + "mlp.c_proj.bias"]
    return F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)


def write_safetensors(path, tensors, metadata):
    header, offset, blobs = {}, 0, []
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dtype = {np.float32: "F32", np.int32: "I32"}[arr.dtype.type]
        b = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def make(name, out_dir):
    L, NH, C, T, V, B = CONFIGS[name]
    torch.manual_seed(1234 + len(name))
    P = {}
    for pname, shape in param_specs(L, C, T, V):
        if pname.endswith(".bias"):
            t = 0.1 * torch.randn(shape)  # non-zero so bias gradients are exercised
        elif "ln_" in pname:
            t = 1.0 + 0.1 * torch.randn(shape)
        else:
            t = 0.2 * torch.randn(shape)
        P[pname] = t.float().requires_grad_(True)
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))

    logits = forward(P, idx, L, NH, C)
    loss = F.cross_entropy(logits.view(-1, V), tgt.view(-1))
    loss.backward()
    out = {k: v.detach().numpy().astype(np.float32) for k, v in P.items()}
    out["ref.inputs"] = idx.numpy().astype(np.int32)
    out["ref.targets"] = tgt.numpy().astype(np.int32)
    out["ref.logits"] = logits.detach().numpy().astype(np.float32)
    out["ref.loss"] = np.array([loss.item()], dtype=np.float32)
    for k, v in P.items():
        out["grad." + k] = v.grad.numpy().astype(np.float32)

    # 10 AdamW steps with clipping on the same batch
    decay = [v for k, v in P.items() if v.dim() == 2]
    no_decay = [v for k, v in P.items() if v.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        lo = F.cross_entropy(forward(P, idx, L, NH, C).view(-1, V), tgt.view(-1))
        lo.backward()
        norm = torch.sqrt(sum((v.grad.double() ** 2).sum() for v in P.values()))
        scale = min(1.0, CLIP / norm.item())  # minitrain's rule: clip / ||g|| (no +1e-6)
        for v in P.values():
            v.grad.mul_(scale)
        opt.step()
        losses.append(lo.item())
    out["ref.step_losses"] = np.array(losses, dtype=np.float32)
    for k, v in P.items():
        out["final." + k] = v.detach().numpy().astype(np.float32)

    meta = {"n_layer": str(L), "n_head": str(NH), "d_model": str(C), "seq_len": str(T),
            "vocab_size": str(V), "batch": str(B), "lr": repr(LR), "weight_decay": repr(WD),
            "beta1": repr(BETAS[0]), "beta2": repr(BETAS[1]), "eps": repr(EPS),
            "grad_clip": repr(CLIP), "steps": str(STEPS), "torch": torch.__version__}
    path = os.path.join(out_dir, f"gpt_{name}.safetensors")
    write_safetensors(path, out, meta)
    print(f"reference {name}: loss {loss.item():.6f}, 10-step losses "
          f"{losses[0]:.4f} -> {losses[-1]:.4f} -> {path}")


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "build/reference"
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    for n in CONFIGS:
        make(n, out_dir)
