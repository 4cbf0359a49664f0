#!/usr/bin/env python3
"""tests/report_html_check.py — open a `minitrain report --html` page in headless Chromium and
check it from the browser's DOM, through the DevTools protocol over a pipe (no websocket
library, no npm package: Chromium's --remote-debugging-pipe reads NUL-terminated JSON commands
on fd 3 and writes replies and events on fd 4).

    report_html_check.py PAGE.html EXPECT.json SHOTS_DIR

EXPECT is a JSON object:
    sections   ids of <section> elements that must exist (each with a visible, non-empty box)
    absent     ids that must NOT exist (a dense run has no pipeline section)
    counts     {css selector: exact number of matching elements}
    at_least   {css selector: minimum number}
    texts      {css selector: substring its textContent must contain}
    pipeline_order  true: in every stage row the forward boxes of microbatches 0..M-1 start in
               order and no two boxes of one stage overlap (measured by the browser's layout)
    schedule, stages, micro   with pipeline_order: the boxes of each stage, left to right,
               follow that schedule's order (1f1b | gpipe | zb-h1, W boxes included) for P
               stages and M microbatches
Also always: no console error, no uncaught exception, no log entry of level error (a failed
resource load, say), no <script>, no element that loads a URL (self-contained), every inline
<svg> laid out with a non-zero size.
Writes SHOTS_DIR/page.png (the whole page) and SHOTS_DIR/<section id>.png (each section).
Exit 0 when every check passes; prints one line per check.
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, exe):
        self.prof = tempfile.mkdtemp(prefix="mt_chromium_")
        r_cmd, w_cmd = os.pipe()  # we write commands -> chromium reads fd 3
        r_ev, w_ev = os.pipe()    # chromium writes fd 4 -> we read
        def child_fds():  # runs in the child before exec: its fds 3 and 4 are the pipes
            a, b = os.dup(r_cmd), os.dup(w_ev)  # out of the way of 3 and 4 first
            os.dup2(a, 3)
            os.dup2(b, 4)
            for fd in (a, b, r_cmd, w_ev, w_cmd, r_ev):
                if fd > 4:
                    os.close(fd)
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--remote-debugging-pipe",
             "--user-data-dir=" + self.prof, "about:blank"],
            close_fds=False, preexec_fn=child_fds, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.prof, "stderr.log"), "wb"))
        # the child holds its ends; close ours
        os.close(r_cmd)
        os.close(w_ev)
        self.w = os.fdopen(w_cmd, "wb", buffering=0)
        self.r = os.fdopen(r_ev, "rb", buffering=0)
        self.buf = b""
        self.next_id = 0
        self.events = []

    def _read_msg(self, deadline):
        while b"\0" not in self.buf:
            if time.time() > deadline:
                raise TimeoutError("no message from chromium")
            chunk = self.r.read(1 << 20)
            if not chunk:
                raise EOFError("chromium closed the pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=None, timeout=30):
        self.next_id += 1
        m = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            m["sessionId"] = session
        self.w.write(json.dumps(m).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            msg = self._read_msg(deadline)
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_event(self, method, timeout=30):
        deadline = time.time() + timeout
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        while True:
            msg = self._read_msg(deadline)
            if msg.get("method") == method:
                return msg
            self.events.append(msg)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.prof, ignore_errors=True)


DOM_PROBE = r"""
(() => {
  const E = %s;
  const out = {sections: {}, counts: {}, texts: {}, svgs: [], scripts: 0, loaders: [],
               order: null};
  for (const s of document.querySelectorAll('section')) {
    const r = s.getBoundingClientRect();
    out.sections[s.id] = {w: r.width, h: r.height, top: r.top + window.scrollY};
  }
  for (const sel of Object.keys(Object.assign({}, E.counts || {}, E.at_least || {})))
    out.counts[sel] = document.querySelectorAll(sel).length;
  for (const sel of Object.keys(E.texts || {})) {
    const el = document.querySelector(sel);
    out.texts[sel] = el ? el.textContent : null;
  }
  for (const s of document.querySelectorAll('svg')) {
    const r = s.getBoundingClientRect();
    out.svgs.push({id: s.id, w: r.width, h: r.height});
  }
  out.scripts = document.querySelectorAll('script').length;
  for (const el of document.querySelectorAll('[src], link[href], image, use[href], iframe, object'))
    out.loaders.push(el.outerHTML.slice(0, 80));
  if (E.pipeline_order) {
    out.order = [];
    for (const row of document.querySelectorAll('#pic-pipeline g.pp-stage')) {
      const stage = +row.dataset.stage, y = row.querySelector('rect').getBBox().y;
      const boxes = [];
      for (const g of document.querySelectorAll('#pic-pipeline g.pp-forward, #pic-pipeline g.pp-backward, #pic-pipeline g.pp-weight')) {
        const b = g.querySelector('rect').getBBox();
        const m = /microbatch (\d+)/.exec(g.querySelector('title').textContent);
        if (Math.abs(b.y - (y + 2)) < 1)
          boxes.push({fwd: g.classList.contains('pp-forward'), w_pass: g.classList.contains('pp-weight'),
                      x: b.x, w: b.width,
                      micro: m ? +m[1] : -1});
      }
      out.order.push({stage, boxes});
    }
  }
  return JSON.stringify(out);
})()
"""


def schedule_order(schedule, P, M, s):
    """The order of forwards (F) and backwards (B) on stage s of P with M microbatches, from the
    papers: GPipe all forwards then all backwards (Huang et al. 2019); 1F1B min(P-s-1, M)
    warm-up forwards, then one forward one backward, then the remaining backwards (Narayanan et
    al. 2021)."""
    if schedule == "gpipe":
        seq = [f"F{i}" for i in range(M)] + [f"B{i}" for i in range(M)]
    elif schedule == "zb-h1":
        # ZB-H1 (Qi et al. 2024): 1F1B's warm-up, then F and B with a W whenever more than s are
        # pending (stage s postpones its first s W passes), then the pending Ws
        warm = min(P - s - 1, M)
        seq = [f"F{i}" for i in range(warm)]
        f, b, w = warm, 0, 0
        while b < M:
            if f < M:
                seq.append(f"F{f}")
                f += 1
            seq.append(f"B{b}")
            b += 1
            while b - w > s:
                seq.append(f"W{w}")
                w += 1
        seq += [f"W{i}" for i in range(w, M)]
    else:
        warm = min(P - s - 1, M)
        seq = [f"F{i}" for i in range(warm)]
        f, b = warm, 0
        while f < M:
            seq += [f"F{f}", f"B{b}"]
            f, b = f + 1, b + 1
        seq += [f"B{i}" for i in range(b, M)]
    return " ".join(seq)


def main():
    page, expect_path, shots = sys.argv[1], sys.argv[2], sys.argv[3]
    expect = json.load(open(expect_path))
    os.makedirs(shots, exist_ok=True)
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("FAIL chromium is not installed (make test-deps installs Debian's chromium)")
        return 1
    fails = []
    def check(cond, what):
        print(("  ok   " if cond else "  FAIL ") + what)
        if not cond:
            fails.append(what)

    b = Browser(exe)
    try:
        target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sess = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for dom in ("Page", "Runtime", "Log"):
            b.send(dom + ".enable", session=sess)
        b.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 900,
               "deviceScaleFactor": 1, "mobile": False}, session=sess)
        b.send("Page.navigate", {"url": "file://" + os.path.abspath(page)}, session=sess)
        b.wait_event("Page.loadEventFired", timeout=60)
        res = b.send("Runtime.evaluate", {"expression": DOM_PROBE % json.dumps(expect),
                                          "returnByValue": True}, session=sess)
        if "exceptionDetails" in res:
            raise RuntimeError("DOM probe failed: " + json.dumps(res["exceptionDetails"])[:300])
        dom = json.loads(res["result"]["value"])
        # screenshots: the whole page, then each section
        size = b.send("Page.getLayoutMetrics", session=sess)["cssContentSize"]
        shot = b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                      "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                               "scale": 1}}, session=sess, timeout=60)
        open(os.path.join(shots, "page.png"), "wb").write(base64.b64decode(shot["data"]))
        for sid, r in dom["sections"].items():
            if not sid or r["h"] <= 0:
                continue
            shot = b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                          "clip": {"x": 0, "y": r["top"], "width": 1280, "height": r["h"] + 16,
                                   "scale": 1}}, session=sess, timeout=60)
            open(os.path.join(shots, sid + ".png"), "wb").write(base64.b64decode(shot["data"]))
        # console and log: what arrived while the page loaded and was probed
        errors = []
        for e in b.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                errors.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:200])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
                errors.append("console." + p["type"] + ": " + json.dumps(p.get("args"))[:200])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append("log: " + p["entry"].get("text", "")[:200])
    finally:
        b.close()

    check(not errors, "no console errors, exceptions or error log entries" +
          ("" if not errors else ": " + " | ".join(errors[:3])))
    check(dom["scripts"] == 0, f"no <script> elements ({dom['scripts']})")
    check(not dom["loaders"], "self-contained: no element loads a URL" +
          ("" if not dom["loaders"] else ": " + dom["loaders"][0]))
    bad_svgs = [s["id"] for s in dom["svgs"] if not (s["w"] > 50 and s["h"] > 50)]
    check(dom["svgs"] and not bad_svgs, f"{len(dom['svgs'])} inline SVGs, each laid out with a "
          f"visible size" + (f" (not: {bad_svgs})" if bad_svgs else ""))
    for sid in expect.get("sections", []):
        r = dom["sections"].get(sid)
        check(r is not None and r["h"] > 30, f"section #{sid} is rendered"
              + ("" if r else " (missing)"))
    for sid in expect.get("absent", []):
        check(sid not in dom["sections"], f"no section #{sid} (does not apply)")
    for sel, n in expect.get("counts", {}).items():
        check(dom["counts"][sel] == n, f"{sel}: {dom['counts'][sel]} elements, expected {n}")
    for sel, n in expect.get("at_least", {}).items():
        check(dom["counts"][sel] >= n, f"{sel}: {dom['counts'][sel]} elements, at least {n}")
    for sel, sub in expect.get("texts", {}).items():
        t = dom["texts"].get(sel)
        check(t is not None and sub in t, f"{sel} contains '{sub}'" +
              ("" if t is not None else " (no such element)"))
    if expect.get("pipeline_order"):
        rows = dom["order"] or []
        check(len(rows) == expect.get("stages", 0), f"pipeline rows: {len(rows)} stages drawn")
        for row in rows:
            fw = [bx for bx in row["boxes"] if bx["fwd"]]
            ordered = all(fw[i]["x"] >= fw[i - 1]["x"] + fw[i - 1]["w"] - 0.5 for i in range(1, len(fw)))
            allb = sorted(row["boxes"], key=lambda bx: bx["x"])
            disjoint = all(allb[i]["x"] >= allb[i - 1]["x"] + allb[i - 1]["w"] - 0.5
                           for i in range(1, len(allb)))
            check(ordered and disjoint, f"stage {row['stage']}: {len(fw)} forwards in microbatch "
                  f"order, {len(allb)} boxes without overlap")
            if expect.get("schedule"):
                got = " ".join(("F" if bx["fwd"] else "W" if bx.get("w_pass") else "B") +
                               str(bx["micro"]) for bx in allb)
                want = schedule_order(expect["schedule"], expect["stages"], expect["micro"],
                                      row["stage"])
                check(got == want, f"stage {row['stage']}: measured order is {expect['schedule']}'s"
                      f" ({got})" + ("" if got == want else f", expected {want}"))
    print(f"report html: {'all checks passed' if not fails else str(len(fails)) + ' FAILED'}"
          f" (screenshots in {shots})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
