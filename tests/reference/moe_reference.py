#!/usr/bin/python3
"""tests/reference/moe_reference.py — golden values for minitrain's MoE layer (model/moe.c).

An independent PyTorch implementation of the layer documented in model/moe.h, written the
GShard way rather than the C way: every expert runs densely on every token, routing is a one-hot
tensor, the capacity priority (all first choices before any second choice, then token position)
is a cumulative sum over the (slot, token)-flattened one-hot, and gradients come from autograd.

For each configuration it writes build/reference/moe_<name>.safetensors with
  x (N, C), r (N, C)  the input and the weights of the scalar L = Σ y ⊙ r + aux_grad·(aux + z),
  router_w (E, C), fc_w (E, H, C), fc_b (E, H), proj_w (E, C, H), proj_b (E, C),
  ref.y (N, C), ref.aux (1), ref.z (1), ref.dropped (1, int32),
  grad.x, grad.router_w, grad.fc_w, grad.fc_b, grad.proj_w, grad.proj_b (dL/d·),
and N, C, H, E, top_k, capacity_factor, aux_coef, z_coef, aux_grad in __metadata__.

The routing is checked to be far from ties (probability gaps ≥ 1e-3 around every chosen expert)
so fp32 rounding on the C side cannot pick different experts; configurations with a capacity are
checked to drop something.
Run with Debian's interpreter: /usr/bin/python3 tests/reference/moe_reference.py OUT_DIR
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from gpt_reference import write_safetensors

CONFIGS = {
    # name: (N, C, E, H, top_k, capacity_factor, aux_coef, z_coef, aux_grad)
    "k2_dropless": (24, 16, 4, 64, 2, 0.0, 0.01, 0.001, 0.7),
    "k1_cap": (24, 16, 4, 64, 1, 1.0, 0.01, 0.001, 0.7),
    "k2_cap": (24, 16, 4, 64, 2, 0.75, 0.05, 0.01, 1.3),
}


def capacity(cf, n, k, e):
    if cf <= 0:
        return 0
    x = cf * n * k / e
    return max(1, math.ceil(x - 1e-6 * x))


def layer(P, x, E, k, cap, alpha, beta):
    N = x.shape[0]
    logits = x @ P["router_w"].T                          # (N, E)
    probs = logits.softmax(-1)
    topv, topi = torch.topk(probs, k, dim=-1)             # (N, k), descending
    gates = topv / topv.sum(-1, keepdim=True) if k == 2 else topv
    onehot = F.one_hot(topi.T, E)                         # (k, N, E): slot-major
    pos = torch.cumsum(onehot.reshape(k * N, E), 0).reshape(k, N, E)
    kept = (onehot > 0) & ((pos <= cap) if cap > 0 else True)
    keep = kept.any(-1).T.float()                         # (N, k)
    dropped = int((onehot.sum() - kept.sum()).item())
    h = F.gelu(torch.einsum("nc,ehc->enh", x, P["fc_w"]) + P["fc_b"][:, None, :],
               approximate="tanh")
    outs = torch.einsum("enh,ech->enc", h, P["proj_w"]) + P["proj_b"][:, None, :]  # (E, N, C)
    ar = torch.arange(N)
    y = sum((keep[:, s] * gates[:, s])[:, None] * outs[topi[:, s], ar] for s in range(k))
    f = onehot.sum((0, 1)).float() / (N * k)             # not differentiable
    aux = alpha * E * (f * probs.mean(0)).sum()
    z = beta * (torch.logsumexp(logits, -1) ** 2).mean()
    return y, aux, z, dropped, probs


def make(name, out_dir):
    N, C, E, H, k, cf, alpha, beta, aux_grad = CONFIGS[name]
    cap = capacity(cf, N, k, E)
    for seed in range(100):
        torch.manual_seed(4321 + 97 * seed + len(name))
        P = {"router_w": 0.5 * torch.randn(E, C), "fc_w": 0.2 * torch.randn(E, H, C),
             "fc_b": 0.1 * torch.randn(E, H), "proj_w": 0.2 * torch.randn(E, C, H),
             "proj_b": 0.1 * torch.randn(E, C)}
        x = torch.randn(N, C)
        r = torch.randn(N, C)
        with torch.no_grad():
            _, _, _, dropped, probs = layer(P, x, E, k, cap, alpha, beta)
        srt = probs.sort(-1, descending=True).values
        gaps = srt[:, :k] - srt[:, 1:k + 1]              # chosen vs next, every rank
        if gaps.min() >= 1e-3 and (cap == 0 or dropped > 0):
            break
    else:
        raise SystemExit(f"{name}: no seed gives a tie-free routing with drops")
    for t in P.values():
        t.requires_grad_(True)
    x.requires_grad_(True)
    y, aux, z, dropped, _ = layer(P, x, E, k, cap, alpha, beta)
    L = (y * r).sum() + aux_grad * (aux + z)
    L.backward()
    out = {"x": x.detach().numpy(), "r": r.numpy()}
    out.update({n: t.detach().numpy() for n, t in P.items()})
    out["ref.y"] = y.detach().numpy()
    out["ref.aux"] = np.array([aux.item()], dtype=np.float32)
    out["ref.z"] = np.array([z.item()], dtype=np.float32)
    out["ref.dropped"] = np.array([dropped], dtype=np.int32)
    out["grad.x"] = x.grad.numpy()
    for n, t in P.items():
        out["grad." + n] = t.grad.numpy()
    out = {n: (a.astype(np.float32) if a.dtype != np.int32 else a) for n, a in out.items()}
    meta = {"N": str(N), "C": str(C), "E": str(E), "H": str(H), "top_k": str(k),
            "capacity_factor": repr(cf), "aux_coef": repr(alpha), "z_coef": repr(beta),
            "aux_grad": repr(aux_grad), "capacity": str(cap), "torch": torch.__version__}
    path = os.path.join(out_dir, f"moe_{name}.safetensors")
    write_safetensors(path, out, meta)
    print(f"reference {name}: aux {aux.item():.6f} z {z.item():.6f} dropped {dropped} -> {path}")


if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "build/reference"
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    for n in CONFIGS:
        make(n, out_dir)
