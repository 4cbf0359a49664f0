#!/usr/bin/python3
"""tests/reference/compare_runs.py — do two minitrain runs hold the same model?

usage: compare_runs.py BASE_RUN_DIR OTHER_RUN_DIR [--steps N] [--exact]

Checks that the per-step training losses in run.db agree (relative 1e-5, or bit for bit with
--exact) and that every tensor of model.safetensors agrees within 1e-4 · max|p| (or exactly).
The key third of attn.c_attn.bias is compared loosely: its gradient is exactly zero in exact
arithmetic (q·(k+b) shifts a whole row of scores, which softmax ignores), so both runs only see
rounding noise there and Adam turns noise of either sign into ±lr steps.
Prints one summary line; exits 1 with the first disagreement.
"""
import argparse, json, sqlite3, struct, sys
import numpy as np

def losses(d):
    db = sqlite3.connect(d + "/run.db")
    return [r[0] for r in db.execute(
        "SELECT train_loss FROM metrics WHERE train_loss IS NOT NULL ORDER BY step")]

def tensors(d):
    raw = open(d + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).copy()
    return out

ap = argparse.ArgumentParser()
ap.add_argument("base"); ap.add_argument("other")
ap.add_argument("--steps", type=int, default=8); ap.add_argument("--exact", action="store_true")
ap.add_argument("--lr", type=float, default=3e-3)
a = ap.parse_args()
la, lb = losses(a.base), losses(a.other)
if not (len(la) == len(lb) == a.steps):
    sys.exit(f"step counts differ: {len(la)} vs {len(lb)} (want {a.steps})")
for i, (x, y) in enumerate(zip(la, lb)):
    if (x != y) if a.exact else abs(x - y) > 1e-5 * abs(x):
        sys.exit(f"step {i+1}: loss {y!r} vs base {x!r}")
ta, tb = tensors(a.base), tensors(a.other)
if ta.keys() != tb.keys():
    sys.exit(f"tensor names differ: {sorted(set(ta) ^ set(tb))[:5]}")
worst = 0.0
for k in ta:
    x, y = ta[k], tb[k]
    if k.endswith("attn.c_attn.bias") and not a.exact:
        C = x.size // 3
        if np.abs(x[C:2*C] - y[C:2*C]).max() > 2 * a.steps * a.lr:
            sys.exit(f"{k}: key bias moved more than 2·steps·lr apart")
        x, y = np.concatenate([x[:C], x[2*C:]]), np.concatenate([y[:C], y[2*C:]])
    d = np.abs(x - y).max()
    scale = np.abs(x).max()
    if (d != 0) if a.exact else d > 1e-4 * scale + 1e-12:
        sys.exit(f"{k}: max |diff| {d:.3g} vs tolerance {1e-4 * scale:.3g}")
    worst = max(worst, d / (scale + 1e-30))
print(f"losses match ({a.steps} steps{', bit for bit' if a.exact else ''}), "
      f"params max rel diff {worst:.2e}")
