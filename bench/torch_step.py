#!/usr/bin/python3
"""bench/torch_step.py — the training step of bench/bench_step.c in PyTorch, for bench_vs_torch.sh.

Same shape (GPT-2 124M: L=12, d=768, H=12, V=50257, wpe 1024; B=4, T=64, fp32), same step
(zero grad, forward through tests/reference/gpt_reference.py's model — the model minitrain is
checked against — cross-entropy, backward, global-norm clip at 1.0, AdamW), same thread count.
Step 0 is a warm-up; prints one line per step and a last line `torch tok/s MEDIAN BEST`.

  /usr/bin/python3 bench/torch_step.py [THREADS] [STEPS]
"""
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from gpt_reference import forward, param_specs  # noqa: E402

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
L, NH, C, V, B, T = 12, 12, 768, 50257, 4, 64
torch.set_num_threads(threads)
torch.manual_seed(1)
P = {}
for name, shape in param_specs(L, C, 1024, V):
    t = torch.zeros(shape) if name.endswith(".bias") else (
        torch.ones(shape) if "ln_" in name else 0.02 * torch.randn(shape))
    P[name] = t.requires_grad_(True)
decay = [v for k, v in P.items() if v.dim() == 2]
no_decay = [v for k, v in P.items() if v.dim() != 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                         {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, betas=(0.9, 0.95),
                        eps=1e-8)
idx = torch.randint(0, V, (B, T))
tgt = torch.randint(0, V, (B, T))
times = []
for s in range(steps + 1):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=False)
    loss = F.cross_entropy(forward(P, idx, L, NH, C).view(-1, V), tgt.view(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
    opt.step()
    dt = time.perf_counter() - t0
    print(f"torch step {s}{' (warm-up)' if s == 0 else ''}: loss {loss.item():.4f} | {dt * 1e3:.0f} ms",
          flush=True)
    if s > 0:
        times.append(dt)
print(f"torch tok/s {B * T / statistics.median(times):.1f} {B * T / min(times):.1f}")
