#!/usr/bin/env python3
"""tests/dashboard_check.py — drive `minitrain dashboard` in headless Chromium over the DevTools
protocol (the pipe Browser of tests/report_html_check.py) while a supervised job trains, and check
it from the DOM.

    dashboard_check.py BASE_URL LIVE_RUN_DIR OTHER_RUN_DIR SHOTS_DIR

LIVE_RUN_DIR is a job that is training now and will crash once (an injected kill fault) and be
restarted by the supervisor; OTHER_RUN_DIR a finished run with another learning rate. Checks, in
the order a person would see them:
  1. the runs page lists the live run as running (its row's data-status), the other as completed;
  2. the live run's page: its loss curve (#pic-metrics, the loss panel's polylines) gains points
     between two reads 4 s apart WITHOUT reloading (the page's own polling swapped them in);
  3. the fault shows: an events-table row tr.ev-failure and "crash" in the ETTR picture;
  4. the job's end flips the header's status to completed (again by the page's own polling);
     the runs page then says completed too;
  5. compare: 2 runs x 2 panels of curves, each with points; the lr row of the configs differs;
  6. at a phone's width (390 px) no page is wider than the screen;
  and always: no console error or exception, no error log entry, no <script src>, no element
  that loads a URL, and every request the pages make goes to BASE_URL (nothing off the host).
Screenshots: SHOTS_DIR/{runs,run,run_fault,run_end,runs_end,compare,runs_phone,run_phone}.png, each also as
NAME_top.png (its first 1000 px). Exit 0 when all
pass; one line per check.
"""
import base64
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_html_check import Browser  # noqa: E402

PROBE = r"""
(() => {
  const q = s => document.querySelector(s), qa = s => document.querySelectorAll(s);
  const pts = sel => [...qa(sel)].map(p => (p.getAttribute('points') || '').trim().split(/\s+/).filter(x => x).length);
  const rows = {};
  for (const tr of qa('table.runs tr.run')) rows[tr.dataset.dir] = tr.dataset.status;
  const loaders = [];
  for (const el of qa('[src], link[href], image, use[href], iframe, object')) loaders.push(el.outerHTML.slice(0, 80));
  return JSON.stringify({
    rows, title: document.title,
    status: (q('header h1 .status') || {}).textContent || null,
    loss_points: pts('#pic-metrics g.panel[data-panel=loss] polyline.series').reduce((a, b) => a + b, 0),
    failures: qa('table.events tr.ev-failure').length,
    ettr_text: (q('#pic-ettr') || {}).textContent || '',
    cmp: [...qa('#pic-compare polyline.cmp-series')].map(p => [p.closest('g.panel').dataset.panel, +p.dataset.run,
          (p.getAttribute('points') || '').trim().split(/\s+/).filter(x => x).length]),
    diff_keys: [...qa('table.configs tr.diff th')].map(t => t.textContent),
    scripts_src: qa('script[src]').length, loaders,
    width: document.documentElement.scrollWidth, view: window.innerWidth,
    sections: [...qa('section')].map(s => s.id),
  });
})()
"""


def main():
    base, live, other, shots = sys.argv[1:5]
    os.makedirs(shots, exist_ok=True)
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        print("FAIL chromium is not installed (make test-deps installs Debian's chromium)")
        return 1
    fails = []

    def check(cond, what):
        print(("  ok   " if cond else "  FAIL ") + what, flush=True)
        if not cond:
            fails.append(what)

    b = Browser(exe)
    requests = []
    try:
        target = b.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = b.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for dom in ("Page", "Runtime", "Log", "Network"):
            b.send(dom + ".enable", session=s)

        def width(w, mobile=False):
            b.send("Emulation.setDeviceMetricsOverride", {"width": w, "height": 900,
                   "deviceScaleFactor": 1, "mobile": mobile}, session=s)

        def go(path):
            b.send("Page.navigate", {"url": base + path}, session=s)
            b.wait_event("Page.loadEventFired", timeout=60)

        def probe():
            r = b.send("Runtime.evaluate", {"expression": PROBE, "returnByValue": True}, session=s)
            if "exceptionDetails" in r:
                raise RuntimeError("probe: " + json.dumps(r["exceptionDetails"])[:300])
            return json.loads(r["result"]["value"])

        def wait_for(cond, timeout):
            end = time.time() + timeout
            while True:
                d = probe()
                if cond(d) or time.time() > end:
                    return d
                time.sleep(0.5)
                b.send("Runtime.evaluate", {"expression": "1"}, session=s)  # drain events

        def shot_section(sid, name):  # one section of the page, for docs/img
            r = b.send("Runtime.evaluate", {"expression": f"JSON.stringify((()=>{{const r=document.getElementById('{sid}').getBoundingClientRect();return [r.top+window.scrollY,r.height]}})())",
                       "returnByValue": True}, session=s)
            top, h = json.loads(r["result"]["value"])
            img = b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                         "clip": {"x": 0, "y": top - 8, "width": 1280, "height": h + 16, "scale": 1}},
                         session=s, timeout=60)
            open(os.path.join(shots, name + ".png"), "wb").write(base64.b64decode(img["data"]))

        def shot(name):
            size = b.send("Page.getLayoutMetrics", session=s)["cssContentSize"]
            img = b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                         "clip": {"x": 0, "y": 0, "width": size["width"],
                                  "height": min(size["height"], 6000), "scale": 1}},
                         session=s, timeout=60)
            open(os.path.join(shots, name + ".png"), "wb").write(base64.b64decode(img["data"]))
            img = b.send("Page.captureScreenshot", {"format": "png", "clip": {"x": 0, "y": 0,
                         "width": size["width"], "height": min(size["height"], 1000), "scale": 1}},
                         session=s, timeout=60)  # the first screenful, for docs/img
            open(os.path.join(shots, name + "_top.png"), "wb").write(base64.b64decode(img["data"]))

        width(1280)
        # 1. the runs page lists the live job as running
        go("/")
        d = wait_for(lambda d: d["rows"].get(live) == "running", 40)
        check(d["rows"].get(live) == "running", f"runs page: the live job is running ({d['rows'].get(live)})")
        check(d["rows"].get(other) == "completed", f"runs page: the other run is completed ({d['rows'].get(other)})")
        shot("runs")
        # 2. the run's page gains loss points while it trains (live, no reload)
        go("/run?dir=" + live)
        first = probe()
        time.sleep(4)
        second = wait_for(lambda d: d["loss_points"] > first["loss_points"], 6)
        check(first["loss_points"] > 0 and second["loss_points"] > first["loss_points"],
              f"run page: the loss plot gains points without a reload ({first['loss_points']} -> "
              f"{second['loss_points']})")
        check(all(x in second["sections"] for x in ("summary", "config", "ettr", "metrics", "checkpoints", "events")),
              "run page: the report's sections (summary, config, ettr, metrics, checkpoints, events)")
        shot("run")
        shot_section("metrics", "run_metrics")
        # 3. the fault appears in the events table and in the ETTR picture
        d = wait_for(lambda d: d["failures"] >= 1 and "crash" in d["ettr_text"], 90)
        check(d["failures"] >= 1, f"run page: the injected fault is in the events table ({d['failures']} failure rows)")
        check("crash" in d["ettr_text"], "run page: the ETTR picture marks the crash")
        shot("run_fault")
        shot_section("ettr", "run_fault_ettr")
        shot_section("events", "run_fault_events")
        # 4. the end flips the status
        d = wait_for(lambda d: d["status"] == "completed", 120)
        check(d["status"] == "completed", f"run page: the status flips to completed at the end ({d['status']})")
        shot("run_end")
        go("/")
        d = probe()
        check(d["rows"].get(live) == "completed", f"runs page: the live job now completed ({d['rows'].get(live)})")
        shot("runs_end")
        # 5. compare
        go(f"/compare?run={live}&run={other}")
        d = probe()
        got = {(panel, run): 0 for panel in ("step", "wall") for run in (0, 1)}
        launches = {}
        for panel, run, n in d["cmp"]:
            got[(panel, run)] = got.get((panel, run), 0) + n
            launches[(panel, run)] = launches.get((panel, run), 0) + 1
        check(len(got) == 4 and min(got.values()) > 1,
              f"compare: 2 runs x 2 panels of loss curves, each with points ({got})")
        check(launches.get(("step", 0)) == 2 and launches.get(("step", 1)) == 1,
              f"compare: one curve per launch (the crashed job 2, the other 1: {launches})")
        check("lr" in d["diff_keys"], f"compare: the configs' lr row is marked as differing ({d['diff_keys']})")
        shot("compare")
        # 6. a phone's width
        width(390, mobile=True)
        for path, name in (("/", "runs_phone"), ("/run?dir=" + live, "run_phone"),
                           (f"/compare?run={live}&run={other}", None)):
            go(path)
            d = probe()
            check(d["width"] <= 391, f"at 390 px, {path.split('?')[0]} is no wider than the screen ({d['width']} px)")
            check(d["scripts_src"] == 0 and not d["loaders"], f"{path.split('?')[0]}: no external script, no element loads a URL"
                  + ("" if not d["loaders"] else ": " + d["loaders"][0]))
            if name:
                shot(name)
        errors = []
        for e in b.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Network.requestWillBeSent":
                requests.append(p.get("request", {}).get("url", ""))
            elif m == "Runtime.exceptionThrown":
                errors.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:200])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
                errors.append("console." + p["type"] + ": " + json.dumps(p.get("args"))[:200])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append("log: " + p["entry"].get("text", "")[:200])
    finally:
        b.close()
    check(not errors, "no console errors, exceptions or error log entries" +
          ("" if not errors else ": " + " | ".join(errors[:3])))
    off = [u for u in requests if not (u.startswith(base + "/") or u == base or u.startswith("data:")
                                       or u.startswith("about:"))]
    polls = sum(1 for u in requests if u.startswith(base))
    check(requests and not off, f"{len(requests)} requests, all to {base} ({polls}; the polling among them)"
          + ("" if not off else ": off the host: " + off[0]))
    print(f"dashboard: {'all checks passed' if not fails else str(len(fails)) + ' FAILED'} (screenshots in {shots})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
