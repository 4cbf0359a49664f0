#!/usr/bin/python3
"""bench/serve_load.py — closed-loop load on one `minitrain serve` (for bench/bench_serve.sh).

CLIENTS threads each send streamed completions back to back for DURATION seconds (a request
started before the deadline runs to its end). Prints one line:
  RESULT agg_tok_s=... req=... p50_ms=... p99_ms=... ttft_p50_ms=... ttft_p99_ms=... errors=...
aggregate tok/s = completion tokens of all requests (from the usage chunk) / (last end - start);
latency = a whole request; time to first token = request sent -> first chunk with text.

usage: serve_load.py URL CLIENTS DURATION PROMPT MAX_TOKENS
"""
import http.client, json, sys, threading, time, urllib.parse


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q / 100 * len(v)))] if v else float("nan")


def main():
    url, clients, duration, prompt, max_tokens = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    u = urllib.parse.urlparse(url)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.8, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    lat, ttft, toks, errors, ends = [], [], [0], [0], []
    lock = threading.Lock()
    t0 = time.perf_counter()
    deadline = t0 + duration

    def client(i):
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        while time.perf_counter() < deadline:
            ts = time.perf_counter()
            first, n = None, 0
            try:
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                if r.status != 200:
                    r.read()
                    with lock: errors[0] += 1
                    continue
                for line in r:
                    if not line.startswith(b"data: {"):
                        continue
                    ch = json.loads(line[6:])
                    if ch["choices"] and ch["choices"][0]["text"] and first is None:
                        first = time.perf_counter()
                    if ch.get("usage"):
                        n = ch["usage"]["completion_tokens"]
            except Exception:
                with lock: errors[0] += 1
                conn.close()
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
                continue
            te = time.perf_counter()
            with lock:
                lat.append(te - ts)
                if first is not None: ttft.append(first - ts)
                toks[0] += n
                ends.append(te)

    th = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in th: t.start()
    for t in th: t.join()
    wall = (max(ends) if ends else time.perf_counter()) - t0
    print("RESULT agg_tok_s=%.2f req=%d p50_ms=%.1f p99_ms=%.1f ttft_p50_ms=%.1f ttft_p99_ms=%.1f errors=%d" % (
        toks[0] / wall, len(lat), 1e3 * pct(lat, 50), 1e3 * pct(lat, 99), 1e3 * pct(ttft, 50),
        1e3 * pct(ttft, 99), errors[0]))


main()
