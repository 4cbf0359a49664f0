#!/usr/bin/python3
"""tests/reference/interop_reference.py — one set of random GPT-2 weights in the files of the other
ecosystems, and PyTorch's logits for them (the reference for tests/run_interop.sh).

  /usr/bin/python3 interop_reference.py OUT_DIR L NH C MAXT V [B T]

Weights are drawn (seeded) in Hugging Face's layout: Conv1D linear layers (in, out), c_attn one
(C, 3C) matrix. Every tensor is random, LayerNorm weights and biases included, so a tensor read
into the wrong place cannot go unnoticed. Written:
  hf/model.safetensors + hf/config.json    GPT-2 names as GPT2LMHeadModel's state_dict has them
                                           ("transformer." prefix, causal-mask buffers attn.bias,
                                           a tied lm_head.weight); hf_plain/ the same without the
                                           prefix, buffers or head (GPT2Model's names)
  gpt2.bin, gpt2_bf16.bin                  llm.c's model file, as llm.c's train_gpt2.py
                                           write_model() writes it: version 3 (fp32) and 5 (bf16,
                                           torch's rounding), nn.Linear (out, in) layout, wte
                                           padded with zero rows to a multiple of 128
  ref_fp32.bin, ref_bf16.bin               int32 B, T, V; int32 tokens (B, T); float32 logits
                                           (B, T, V) of GPT-2's forward (Hugging Face's
                                           GPT2Attention / GPT2MLP arithmetic: x @ W + b with
                                           Conv1D weights, q, k, v = c_attn(x).split(C, dim=2),
                                           tanh GELU) on the fp32 weights and on the bf16-rounded
                                           weights
Only numpy and torch are used; safetensors is written by hand from its public spec.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def draw(L, C, maxT, V, seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, std=0.02: torch.randn(*s, generator=g) * std
    P = {"wte.weight": r(V, C), "wpe.weight": r(maxT, C, std=0.01)}
    for l in range(L):
        p = f"h.{l}."
        P[p + "ln_1.weight"] = 1 + r(C, std=0.1)
        P[p + "ln_1.bias"] = r(C, std=0.1)
        P[p + "attn.c_attn.weight"] = r(C, 3 * C)
        P[p + "attn.c_attn.bias"] = r(3 * C)
        P[p + "attn.c_proj.weight"] = r(C, C)
        P[p + "attn.c_proj.bias"] = r(C)
        P[p + "ln_2.weight"] = 1 + r(C, std=0.1)
        P[p + "ln_2.bias"] = r(C, std=0.1)
        P[p + "mlp.c_fc.weight"] = r(C, 4 * C)
        P[p + "mlp.c_fc.bias"] = r(4 * C)
        P[p + "mlp.c_proj.weight"] = r(4 * C, C)
        P[p + "mlp.c_proj.bias"] = r(C)
    P["ln_f.weight"] = 1 + r(C, std=0.1)
    P["ln_f.bias"] = r(C, std=0.1)
    return P


def forward(P, idx, L, NH, C):
    """GPT-2's forward as Hugging Face's modeling_gpt2 computes it (eval mode)."""
    B, T = idx.shape
    hs = C // NH
    x = P["wte.weight"][idx] + P["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    heads = lambda t: t.view(B, T, NH, hs).transpose(1, 2)  # (B, NH, T, hs)
    for l in range(L):
        p = f"h.{l}."
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], 1e-5)
        q, k, v = (h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]).split(C, dim=2)
        att = (heads(q) @ heads(k).transpose(-1, -2)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ heads(v)).transpose(1, 2).reshape(B, T, C)
        x = x + y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], 1e-5)
        h = F.gelu(h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
    return x @ P["wte.weight"].T


def write_safetensors(path, tensors, metadata=None):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.numpy())
        b = a.tobytes()
        header[name] = {"dtype": {np.float32: "F32"}[a.dtype.type], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def write_hf(out, P, L, NH, C, maxT, V, prefixed):
    os.makedirs(out, exist_ok=True)
    T = {}
    pre = "transformer." if prefixed else ""
    for name, t in P.items():
        T[pre + name] = t
        if prefixed and name.endswith("ln_1.bias"):  # GPT2Attention's causal-mask buffer
            T[pre + name.replace("ln_1.bias", "attn.bias")] = \
                torch.tril(torch.ones(maxT, maxT)).view(1, 1, maxT, maxT)
    if prefixed:
        T["lm_head.weight"] = P["wte.weight"].clone()
    write_safetensors(os.path.join(out, "model.safetensors"), T, {"format": "pt"})
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
           "n_positions": maxT, "n_ctx": maxT, "n_embd": C, "n_layer": L, "n_head": NH,
           "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
           "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "initializer_range": 0.02,
           "scale_attn_weights": True, "tie_word_embeddings": True, "bos_token_id": V - 1,
           "eos_token_id": V - 1}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def write_llmc(path, P, L, NH, C, maxT, V, bf16):
    """llm.c train_gpt2.py write_model(): header, then the parameters in llm.c's order."""
    Vp = (V + 127) // 128 * 128
    header = torch.zeros(256, dtype=torch.int32)
    header[:8] = torch.tensor([20240326, 5 if bf16 else 3, maxT, V, L, NH, C, Vp])
    wte = torch.cat([P["wte.weight"], torch.zeros(Vp - V, C)])
    lin = lambda n: P[n].T  # Conv1D (in, out) -> nn.Linear (out, in), as llm.c's model has them
    stack = lambda f: torch.stack([f(f"h.{l}.") for l in range(L)])
    params = [wte, P["wpe.weight"],
              stack(lambda p: P[p + "ln_1.weight"]), stack(lambda p: P[p + "ln_1.bias"]),
              stack(lambda p: lin(p + "attn.c_attn.weight")), stack(lambda p: P[p + "attn.c_attn.bias"]),
              stack(lambda p: lin(p + "attn.c_proj.weight")), stack(lambda p: P[p + "attn.c_proj.bias"]),
              stack(lambda p: P[p + "ln_2.weight"]), stack(lambda p: P[p + "ln_2.bias"]),
              stack(lambda p: lin(p + "mlp.c_fc.weight")), stack(lambda p: P[p + "mlp.c_fc.bias"]),
              stack(lambda p: lin(p + "mlp.c_proj.weight")), stack(lambda p: P[p + "mlp.c_proj.bias"]),
              P["ln_f.weight"], P["ln_f.bias"]]
    with open(path, "wb") as f:
        f.write(header.numpy().tobytes())
        for t in params:
            t = t.contiguous()
            if bf16:
                f.write(t.to(torch.bfloat16).view(torch.int16).numpy().tobytes())
            else:
                f.write(t.to(torch.float32).numpy().tobytes())


def write_ref(path, P, idx, L, NH, C, V):
    with torch.no_grad():
        logits = forward(P, idx, L, NH, C)
    B, T = idx.shape
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", B, T, V))
        f.write(idx.to(torch.int32).numpy().tobytes())
        f.write(logits.to(torch.float32).contiguous().numpy().tobytes())


def main():
    out = sys.argv[1]
    L, NH, C, maxT, V = (int(a) for a in sys.argv[2:7])
    B, T = (int(sys.argv[7]), int(sys.argv[8])) if len(sys.argv) > 8 else (2, min(16, maxT))
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(2)
    P = draw(L, C, maxT, V, seed=1234)
    idx = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(99))
    write_llmc(os.path.join(out, "gpt2.bin"), P, L, NH, C, maxT, V, bf16=False)
    write_llmc(os.path.join(out, "gpt2_bf16.bin"), P, L, NH, C, maxT, V, bf16=True)
    write_ref(os.path.join(out, "ref_fp32.bin"), P, idx, L, NH, C, V)
    if C <= 256:  # the Hugging Face files and the bf16 reference for small shapes only
        write_hf(os.path.join(out, "hf"), P, L, NH, C, maxT, V, prefixed=True)
        write_hf(os.path.join(out, "hf_plain"), P, L, NH, C, maxT, V, prefixed=False)
        Pb = {k: v.to(torch.bfloat16).to(torch.float32) for k, v in P.items()}
        write_ref(os.path.join(out, "ref_bf16.bin"), Pb, idx, L, NH, C, V)
    n = sum(t.numel() for t in P.values())
    print(f"reference: L={L} NH={NH} C={C} maxT={maxT} V={V} ({n / 1e6:.2f}M parameters), "
          f"logits for B={B} T={T} -> {out}")


if __name__ == "__main__":
    main()
