#!/usr/bin/env bash
# tests/run_gateway.sh — `minitrain gateway` end to end (issue #13): real `minitrain serve`
# upstreams misbehaving on demand (--fault-rate, --fault-status, --fault-empty, --fault-latency),
# real gateways, real clients (curl, wrk, OpenAI's npm client), a real redis-server. Every process
# listens on 127.0.0.1 with --port 0 and is stopped by pid.
#
#   bash tests/run_gateway.sh                        # uses ./minitrain; about 2-3 minutes
#   MT=build-asan/minitrain bash tests/run_gateway.sh
#
# Covered: config errors (exit 2), the open gateway, the 30%-failing primary with a healthy
# fallback (every request succeeds), ejection after 5 consecutive failures and the half-open
# return after the ejection time, empty 200s, first-token and whole-request timeouts, 429 with
# Retry-After (honoured, and too long → fallback), all targets ejected (→ the one out longest,
# then 503 + Retry-After), guards (body and max_tokens caps, content rules on prompts and on
# streamed completions split across events), key roles, 401s, the concurrent budget (50 parallel
# vs a budget of 10), two gateways sharing Redis, disconnect mid-stream (upstream cancelled,
# reservation released), kill -9 of the primary under wrk load (zero client errors), the openai
# npm client through the gateway.
set -euo pipefail
cd "$(dirname "$0")/.."
MT=${MT:-./minitrain}
PY=/usr/bin/python3
. tests/gateway_lib.sh # (sources tests/lib.sh)
tmp_dir mt_gateway
export TMP
# every gateway must stop cleanly on SIGTERM (under ASan: no leak, no report)
stopgw() { local rc=0; stop "$1" || rc=$?; [ "$rc" = 0 ] || bad "gateway $1: exit $rc after SIGTERM"; }

[ -x build/bench/serve_mkmodel ] || make -s build/bench/serve_mkmodel >/dev/null
build/bench/serve_mkmodel "$TMP/m" 2 2 64 128 256 >/dev/null        # tiny: fast answers
build/bench/serve_mkmodel "$TMP/slow" 4 4 256 1024 256 >/dev/null   # slow enough to cut a stream
C='{"model":"m","prompt":"hello","max_tokens":4}'

echo "-- configuration errors: one clear line, exit 2"
cat > "$TMP/bad.ini" <<'EOF'
[upstream a]
url = http://127.0.0.1:1
[model m]
targets = a
[policy]
consecutive_failures = lots
EOF
rc=0; "$MT" gateway --config "$TMP/bad.ini" 2>"$TMP/err" >/dev/null || rc=$?
check "malformed config value: exit 2, FILE:LINE names the key" \
  bash -c "[ $rc = 2 ] && grep -q \"bad.ini:6: 'consecutive_failures' needs a whole number, got 'lots'\" $TMP/err"
printf '[gateway]\nport 8090\n' > "$TMP/bad2.ini"
rc=0; "$MT" gateway --config "$TMP/bad2.ini" 2>"$TMP/err" >/dev/null || rc=$?
check "malformed line: exit 2 with the line number" \
  bash -c "[ $rc = 2 ] && grep -q 'bad2.ini:2: malformed line' $TMP/err && [ \$(wc -l < $TMP/err) = 1 ]"
rc=0; "$MT" gateway --upstream a=http://127.0.0.1:1 --route m=a,b 2>"$TMP/err" >/dev/null || rc=$?
check "route to an unknown upstream: exit 2" bash -c "[ $rc = 2 ] && grep -q \"unknown upstream 'b'\" $TMP/err"
if [ ! -f safety/pii.c ]; then
  rc=0; "$MT" gateway --upstream a=http://127.0.0.1:1 --route m=a --pii mask 2>"$TMP/err" >/dev/null || rc=$?
  check "pii = mask without safety/pii in the build: refused by name, exit 2" \
    bash -c "[ $rc = 2 ] && grep -q 'PII guard needs safety/pii' $TMP/err"
fi
check "--help: exit 0, lists the policy table" bash -c "$MT gateway --help | grep -q -- '--consecutive-failures'"

echo "-- an open gateway in front of one server"
start_serve A --run "$TMP/m" --model-name m --slots 2
start_gw G1 --upstream "a=$URL_A" --route m=a
check "says it is open at start" grep -q 'OPEN: no keys database' "$TMP/G1.err"
check "/health 200 with the model's available targets" \
  bash -c "[ \"\$(curl -s -o $TMP/h -w '%{http_code}' $URL_G1/health)\" = 200 ] && grep -q '\"m\":1' $TMP/h"
check "/v1/models lists m" bash -c "curl -s $URL_G1/v1/models | grep -q '\"id\":\"m\"'"
R='{"model":"m","prompt":"ROMEO:","max_tokens":12,"temperature":0.9,"seed":7}'
post "$URL_A" /v1/completions "$R" >/dev/null; cp "$TMP/body" "$TMP/direct"
st=$(curl -s -o "$TMP/body" -D "$TMP/hdr" -w '%{http_code}' -H 'X-Request-Id: test-req-1' -d "$R" "$URL_G1/v1/completions")
check "completion through the gateway = direct (same seed), x-request-id echoed" \
  bash -c "[ $st = 200 ] && $PY -c \"import json; a=json.load(open('$TMP/direct')); b=json.load(open('$TMP/body')); assert a['choices'][0]['text']==b['choices'][0]['text']\" && grep -qi 'x-request-id: test-req-1' $TMP/hdr"
check "the access log carries the request id, never the prompt" \
  bash -c "grep -q 'req=test-req-1 .*status=200 upstream=a attempts=a:ok' $TMP/G1.err && ! grep -q ROMEO $TMP/G1.err"
S='{"model":"m","prompt":"hi","max_tokens":8,"stream":true,"seed":3,"temperature":0.8}'
curl -sN -d "$S" "$URL_A/v1/completions" > "$TMP/s_direct"
curl -sN -d "$S" "$URL_G1/v1/completions" > "$TMP/s"
# joined text of a completions stream, and its finish reason
cat > "$TMP/sse.py" <<'PYEOF'
import json, sys
text, finish, usage_chunks, done = "", None, 0, False
for line in open(sys.argv[1], encoding="utf-8"):
    if not line.startswith("data: "): continue
    d = line[6:].strip()
    if d == "[DONE]": done = True; continue
    j = json.loads(d)
    if not j["choices"]: usage_chunks += 1; continue
    c = j["choices"][0]
    text += c.get("text") or (c.get("delta") or {}).get("content") or ""
    finish = c.get("finish_reason") or finish
print(json.dumps([text, finish, usage_chunks, done]))
PYEOF
check "streaming passthrough = the direct stream (same seed), [DONE], no injected usage chunk" \
  bash -c "[ \"\$($PY $TMP/sse.py $TMP/s)\" = \"\$($PY $TMP/sse.py $TMP/s_direct)\" ] && $PY $TMP/sse.py $TMP/s | grep -q '\"length\", 0, true\]'"
curl -sN -d '{"model":"m","prompt":"hi","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}' "$URL_G1/v1/completions" > "$TMP/s"
check "stream with include_usage keeps the usage chunk" grep -q '"completion_tokens":3' "$TMP/s"
st=$(post "$URL_G1" /v1/chat/completions '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}')
check "chat completions through the gateway" bash -c "[ $st = 200 ] && grep -q '\"object\":\"chat.completion\"' $TMP/body"
check "unknown model 404 (model_not_found), bad JSON 400" \
  bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' -d '{\"model\":\"nope\",\"prompt\":\"x\"}' $URL_G1/v1/completions) = 404 ] && [ \$(curl -s -o /dev/null -w '%{http_code}' -d '{bad' $URL_G1/v1/completions) = 400 ]"
for i in $(seq 6); do st=$(post "$URL_G1" /v1/completions '{"model":"m","prompt":"x","temperature":5}'); done
check "a client's 400 from the upstream is passed through; six of them never eject" \
  bash -c "[ $st = 400 ] && grep -q temperature $TMP/body && [ \$(metric $URL_G1 'minitrain_gateway_upstream_state{upstream=\"a\"}') = 0 ] && [ \$(metric $URL_G1 'minitrain_gateway_ejections_total{upstream=\"a\"}') = 0 ]"
stop G1 && ok "gateway: SIGTERM stops it cleanly (exit 0)" || bad "gateway exit code after SIGTERM"

echo "-- primary failing 30% of requests, healthy fallback"
start_serve P --run "$TMP/m" --model-name m --fault-rate 0.3 --fault-seed 11
start_serve F --run "$TMP/m" --model-name m
start_gw G2 --upstream "p=$URL_P" --upstream "f=$URL_F" --route m=p,f --quiet
ok200=0
for i in $(seq 60); do [ "$(post "$URL_G2" /v1/completions "$C")" = 200 ] && ok200=$((ok200+1)); done
faults=$(curl -s "$URL_P/metrics" | awk '/^minitrain_faults_injected_total/ {print $2}')
check "60/60 client requests succeed (the primary injected $faults faults)" \
  bash -c "[ $ok200 = 60 ] && [ \"${faults:-0}\" -gt 5 ]"
check "retries and fallbacks were used" \
  bash -c "[ \$(metric $URL_G2 'minitrain_gateway_retries_total{upstream=\"p\"}') -gt 0 ] && [ \$(metric $URL_G2 'minitrain_gateway_fallbacks_total{model=\"m\"}') -gt 0 ]"
check "the primary still takes most traffic (30% is below the ejection rule most of the time)" \
  bash -c "[ \$(metric $URL_G2 'minitrain_gateway_upstream_attempts_total{upstream=\"p\"}') -gt 40 ]"
stopgw G2; stop P || true

echo "-- ejection after 5 consecutive failures; back after the ejection time (half-open probe)"
start_serve P --run "$TMP/m" --model-name m --fault-rate 1 --fault-status 500
start_gw G3 --upstream "p=$URL_P" --upstream "f=$URL_F" --route m=p,f --retries-per-target 0 \
  --ejection-base-s 2 --health-interval-s 0.3
s=""
for i in $(seq 5); do post "$URL_G3" /v1/completions "$C" >/dev/null
  s="$s$(metric $URL_G3 'minitrain_gateway_upstream_state{upstream="p"}')"; done
check "ejected by exactly the 5th consecutive failure (states after each: $s)" [ "$s" = 00001 ]
check "ejection logged with its duration" grep -q 'upstream p ejected for 2.0 s' "$TMP/G3.err"
rid=$(grep -o 'req=gw-[0-9a-f]* attempt 1 upstream=p failed' "$TMP/G3.err" | head -1 | cut -d' ' -f1)
check "one request id on its failed attempt and on its access line (${rid#req=})" \
  bash -c "[ -n '$rid' ] && grep -q '$rid key=- POST /v1/completions model=m status=200 upstream=f attempts=p:5xx,f:ok' $TMP/G3.err"
for i in $(seq 5); do post "$URL_G3" /v1/completions "$C" >/dev/null; done
check "while ejected the primary gets no traffic (5 attempts in all), clients all 200" \
  bash -c "[ \$(metric $URL_G3 'minitrain_gateway_upstream_attempts_total{upstream=\"p\"}') = 5 ] && [ \$(metric $URL_G3 'minitrain_gateway_requests_total{key=\"none\",model=\"m\",upstream=\"f\",code=\"200\"}') = 10 ]"
# the primary is repaired: restarted, healthy, on the same port
port=$PORT_P; kill9 P
SERVE_PORT=$port start_serve P --run "$TMP/m" --model-name m
sleep 2.2
check "after the ejection time it is half-open (state 2)" \
  [ "$(metric $URL_G3 'minitrain_gateway_upstream_state{upstream="p"}')" = 2 ]
post "$URL_G3" /v1/completions "$C" >/dev/null
check "one real request probes it and closes the circuit (state 0, served by p)" \
  bash -c "[ \$(metric $URL_G3 'minitrain_gateway_upstream_state{upstream=\"p\"}') = 0 ] && grep -q 'upstream p back in service' $TMP/G3.err && [ \$(metric $URL_G3 'minitrain_gateway_requests_total{key=\"none\",model=\"m\",upstream=\"p\",code=\"200\"}') = 1 ]"
stopgw G3; stop P || true

echo "-- empty 200s, timeouts, 429 with Retry-After"
start_serve E --run "$TMP/m" --model-name m --fault-empty 1
start_gw G4 --upstream "e=$URL_E" --upstream "f=$URL_F" --route m=e,f --quiet
st=$(post "$URL_G4" /v1/completions "$C")
check "empty 200 counts as a failure: the client gets f's real answer" \
  bash -c "[ $st = 200 ] && $PY -c \"import json; d=json.load(open('$TMP/body')); assert d['choices'][0]['text']\" && [ \$(metric $URL_G4 'minitrain_gateway_upstream_failures_total{upstream=\"e\",reason=\"empty\"}') -ge 1 ]"
st=$(post "$URL_G4" /v1/chat/completions '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}')
check "empty chat 200 too" bash -c "[ $st = 200 ] && $PY -c \"import json; d=json.load(open('$TMP/body')); assert d['choices'][0]['message']['content']\""
curl -sN -d '{"model":"m","prompt":"hi","max_tokens":4,"stream":true}' "$URL_G4/v1/completions" > "$TMP/s"
check "empty stream falls back before anything reached the client" \
  bash -c "$PY $TMP/sse.py $TMP/s | grep -q '\"length\", 0, true\]' && ! grep -q error $TMP/s && [ \$(metric $URL_G4 'minitrain_gateway_upstream_failures_total{upstream=\"e\",reason=\"empty\"}') -ge 3 ]"
stopgw G4; stop E || true

start_serve L --run "$TMP/m" --model-name m --fault-latency 3000
start_gw G5 --upstream "l=$URL_L" --upstream "f=$URL_F" --route m=l,f --first-token-timeout-s 0.5 \
  --timeout-s 0.8 --retries-per-target 0
t0=$(date +%s.%N)
curl -sN -d '{"model":"m","prompt":"hi","max_tokens":4,"stream":true}' "$URL_G5/v1/completions" > "$TMP/s"
t1=$(date +%s.%N)
check "first-token timeout: the stream falls back to f within ~0.5 s (took $($PY -c "print(f'{$t1-$t0:.2f}')") s)" \
  bash -c "$PY $TMP/sse.py $TMP/s | grep -q '\"length\", 0, true\]' && $PY -c 'import sys; sys.exit(0 if $t1-$t0 < 2.5 else 1)' && [ \$(metric $URL_G5 'minitrain_gateway_upstream_failures_total{upstream=\"l\",reason=\"first_token_timeout\"}') = 1 ]"
st=$(post "$URL_G5" /v1/completions "$C")
check "whole-request timeout (0.8 s) falls back too" \
  bash -c "[ $st = 200 ] && [ \$(metric $URL_G5 'minitrain_gateway_upstream_failures_total{upstream=\"l\",reason=\"timeout\"}') = 1 ]"
check "ttft histogram observed the stream" \
  bash -c "[ \$(metric $URL_G5 'minitrain_gateway_ttft_seconds_count{model=\"m\"}') = 1 ]"
stopgw G5; stop L || true

start_serve T --run "$TMP/m" --model-name m --fault-status 429 --fault-retry-after 1
start_gw G6 --upstream "t=$URL_T" --route m=t --retries-per-target 1 --quiet
t0=$(date +%s.%N); st=$(post "$URL_G6" /v1/completions "$C"); t1=$(date +%s.%N)
check "429 everywhere: the client gets 429 + Retry-After after the gateway waited 1 s once" \
  bash -c "[ $st = 429 ] && [ \"$(header retry-after)\" = 1 ] && $PY -c 'import sys; sys.exit(0 if 1.0 <= $t1-$t0 < 3 else 1)' && [ \$(metric $URL_G6 'minitrain_gateway_upstream_attempts_total{upstream=\"t\"}') = 2 ]"
stopgw G6
start_gw G6 --upstream "t=$URL_T" --upstream "f=$URL_F" --route m=t,f --retry-after-max-s 0.5 --quiet
t0=$(date +%s.%N); st=$(post "$URL_G6" /v1/completions "$C"); t1=$(date +%s.%N)
check "Retry-After over retry_after_max_s: no wait, straight to the fallback" \
  bash -c "[ $st = 200 ] && $PY -c 'import sys; sys.exit(0 if $t1-$t0 < 0.9 else 1)'"
stopgw G6; stop T || true

echo "-- all targets ejected"
start_serve P --run "$TMP/m" --model-name m --fault-rate 1 --fault-status 503
start_serve Q --run "$TMP/m" --model-name m --fault-rate 1 --fault-status 500
start_gw G7 --upstream "p=$URL_P" --upstream "q=$URL_Q" --route m=p,q --retries-per-target 0 \
  --ejection-base-s 20 --quiet
for i in $(seq 5); do post "$URL_G7" /v1/completions "$C" >/dev/null; done
check "both ejected after 5 failures each" \
  bash -c "[ \$(metric $URL_G7 'minitrain_gateway_upstream_state{upstream=\"p\"}') = 1 ] && [ \$(metric $URL_G7 'minitrain_gateway_upstream_state{upstream=\"q\"}') = 1 ]"
check "/health says 503 when no model has a target" \
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL_G7/health")" = 503 ]
ap=$(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream="p"}')
aq=$(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream="q"}')
st=$(post "$URL_G7" /v1/completions "$C"); ra=$(header retry-after)
check "policy 'longest': one attempt at p (ejected first), then 503 + Retry-After ($ra s)" \
  bash -c "[ $st = 503 ] && [ -n '$ra' ] && [ '$ra' -ge 1 ] && [ '$ra' -le 20 ] && grep -q no_healthy_upstream $TMP/body && [ \$(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream=\"p\"}') = $((ap+1)) ] && [ \$(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream=\"q\"}') = $aq ] && [ \$(metric $URL_G7 minitrain_gateway_all_ejected_total) = 1 ]"
stopgw G7
start_gw G7 --upstream "p=$URL_P" --upstream "q=$URL_Q" --route m=p,q --retries-per-target 0 \
  --ejection-base-s 20 --all-ejected refuse --quiet
for i in $(seq 5); do post "$URL_G7" /v1/completions "$C" >/dev/null; done
a=$(( $(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream="p"}') + $(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream="q"}') ))
st=$(post "$URL_G7" /v1/completions "$C")
check "policy 'refuse': 503 + Retry-After without touching an upstream" \
  bash -c "[ $st = 503 ] && [ -n \"$(header retry-after)\" ] && [ \$(( \$(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream=\"p\"}') + \$(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream=\"q\"}') )) = $a ]"
stopgw G7
start_gw G7 --upstream "p=$URL_P" --upstream "q=$URL_Q" --upstream "f=$URL_F" --route m=p,q,f \
  --max-attempts 3 --retries-per-target 1 --backoff-base-s 0.001 --quiet
st=$(post "$URL_G7" /v1/completions "$C")
check "max_attempts = 3 caps retries and fallbacks together: p, p, q — f never tried, client 5xx" \
  bash -c "[ $st -ge 500 ] && [ \$(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream=\"p\"}') = 2 ] && [ \$(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream=\"q\"}') = 1 ] && [ \$(metric $URL_G7 'minitrain_gateway_upstream_attempts_total{upstream=\"f\"}') = 0 ]"
stopgw G7; stop P || true; stop Q || true

echo "-- active health: an upstream whose /health says 503 loading is out of service"
cat > "$TMP/loading.py" <<'PYEOF'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status":"loading"}'
        self.send_response(503); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    do_POST = do_GET
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PYEOF
$PY "$TMP/loading.py" > "$TMP/loading.port" & LPID=$!; PIDS+=($LPID)
for _ in $(seq 50); do [ -s "$TMP/loading.port" ] && break; sleep 0.1; done
start_gw G9 --upstream "w=http://127.0.0.1:$(cat $TMP/loading.port)" --upstream "f=$URL_F" --route m=w,f \
  --health-interval-s 0.3
st=$(post "$URL_G9" /v1/completions "$C")
check "503 'loading' on /health: out of service (state 1) from the first check, traffic goes to f" \
  bash -c "[ $st = 200 ] && [ \$(metric $URL_G9 'minitrain_gateway_upstream_state{upstream=\"w\"}') = 1 ] && [ \$(metric $URL_G9 'minitrain_gateway_upstream_attempts_total{upstream=\"w\"}') = 0 ] && grep -q 'upstream w fails its health check (503' $TMP/G9.err"
stopgw G9; kill "$LPID" 2>/dev/null || true; wait "$LPID" 2>/dev/null || true


echo "-- guards: body and max_tokens caps, content rules on prompts and on streamed completions"
cat > "$TMP/rules.ini" <<'EOF'
[gateway]
max_tokens = 200
max_body = 4K
[rule codes]
pattern = launch\s+codes
caseless = true
on = prompts
[rule three]
; three printable ASCII characters in a row: the model sends one per event, so every match is
; split across three server-sent events
pattern = [ -~]{3}
window = 3
on = completions
EOF
start_gw G8 --config "$TMP/rules.ini" --upstream "f=$URL_F" --route m=f --quiet
st=$(post "$URL_G8" /v1/completions "{\"model\":\"m\",\"prompt\":\"$(head -c 5000 /dev/zero | tr '\0' x)\"}")
check "body over max_body: 413" [ "$st" = 413 ]
st=$(post "$URL_G8" /v1/completions '{"model":"m","prompt":"x","max_tokens":201}')
check "max_tokens over the cap: 400 naming the cap" bash -c "[ $st = 400 ] && grep -q 'cap of 200' $TMP/body"
st=$(post "$URL_G8" /v1/completions '{"model":"m","prompt":"tell me the LAUNCH   codes","max_tokens":4}')
check "a prompt rule blocks: OpenAI-shaped 400 content_policy_violation, upstream never called" \
  bash -c "[ $st = 400 ] && grep -q '\"code\":\"content_policy_violation\"' $TMP/body && grep -q '\"type\":\"invalid_request_error\"' $TMP/body && [ \$(metric $URL_G8 'minitrain_gateway_upstream_attempts_total{upstream=\"f\"}') = 0 ]"
st=$(post "$URL_G8" /v1/chat/completions '{"model":"m","messages":[{"role":"user","content":"launch codes?"}]}')
check "... in chat messages too" bash -c "[ $st = 400 ] && grep -q content_policy_violation $TMP/body"
cat > "$TMP/cut.py" <<'PYEOF'
import json, re, sys
# expected: the direct text cut at the first match of the rule, finish_reason content_filter
direct = json.loads(sys.argv[1]); via = json.loads(sys.argv[2])
m = re.search(r"[ -~]{3}", direct[0])
want = [direct[0][:m.start()], "content_filter"] if m else direct[:2]
sys.exit(0 if m is not None and via[:2] == want and via[3] else 1)
PYEOF
ok_cut=1
for seed in 1 2 3; do
  S="{\"model\":\"m\",\"prompt\":\"hi\",\"max_tokens\":120,\"stream\":true,\"seed\":$seed}"
  curl -sN -d "$S" "$URL_F/v1/completions" > "$TMP/s_direct"
  curl -sN -d "$S" "$URL_G8/v1/completions" > "$TMP/s"
  $PY "$TMP/cut.py" "$($PY $TMP/sse.py $TMP/s_direct)" "$($PY $TMP/sse.py $TMP/s)" || ok_cut=0
done
check "a completion rule whose matches span 3 SSE events: each stream = the direct text up to the match, then finish_reason content_filter and [DONE] (3 seeds)" \
  [ "$ok_cut" = 1 ]
N='{"model":"m","prompt":"hi","max_tokens":120,"seed":2}'
post "$URL_F" /v1/completions "$N" >/dev/null; cp "$TMP/body" "$TMP/direct"
post "$URL_G8" /v1/completions "$N" >/dev/null
check "the same rule on a non-streamed completion: text cut, finish_reason content_filter" \
  $PY -c "
import json, re
d = json.load(open('$TMP/direct'))['choices'][0]; v = json.load(open('$TMP/body'))['choices'][0]
m = re.search(r'[ -~]{3}', d['text'])
assert m and v['text'] == d['text'][:m.start()] and v['finish_reason'] == 'content_filter', (d, v)"
check "prompts and completions never reach the gateway's logs" bash -c "! grep -qi launch $TMP/G8.err"
stopgw G8
if [ -f safety/pii.c ]; then  # the Makefile builds the PII guard when it is there
  start_gw G8 --pii mask --pii-on prompts --upstream "f=$URL_F" --route m=f --quiet
  P='contact alice.jones@example.com or 4111 1111 1111 1111 today'
  st=$(post "$URL_G8" /v1/completions "{\"model\":\"m\",\"prompt\":\"$P\",\"max_tokens\":2}")
  want=$($PY -c "print(len('contact <EMAIL> or <CARD> today'.encode()))")
  check "pii = mask on prompts: the upstream saw the masked prompt ($want byte tokens, not ${#P})" \
    bash -c "[ $st = 200 ] && $PY -c \"import json; assert json.load(open('$TMP/body'))['usage']['prompt_tokens'] == $want\""
  stopgw G8
else
  echo "  (PII guard not in this build: safety/pii.c absent)"
fi

echo "-- keys and roles, the concurrent budget, two gateways sharing Redis"
DB=$TMP/keys.db
key() { "$MT" gateway keys add --keys-db "$DB" "$@" | tail -1; }
ADMIN=$(key --role admin --name ops); USER=$(key --role user); VIEWER=$(key --role viewer)
BUDGET=$(key --role user --rpm 10); REV=$(key --role user); EXP=$(key --role user --expires 2s)
start_gw GK --keys-db "$DB" --upstream "f=$URL_F" --route m=f
check "with --keys-db the gateway is not open" bash -c "! grep -q OPEN $TMP/GK.err"
code() { curl -s -o "$TMP/body" -w '%{http_code}' "$@"; }
check "no key: 401; /health needs none" \
  bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' -d '$C' $URL_GK/v1/completions) = 401 ] && [ \$(curl -s -o /dev/null -w '%{http_code}' $URL_GK/health) = 200 ]"
check "user key: completions 200" [ "$(post "$URL_GK" /v1/completions "$C" "$USER")" = 200 ]
check "user key cannot call /admin (403)" \
  [ "$(code -H "Authorization: Bearer $USER" "$URL_GK/admin/keys")" = 403 ]
check "viewer key cannot create keys (403), may list them (200), may not generate (403)" \
  bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $VIEWER' -d '{\"role\":\"user\"}' $URL_GK/admin/keys) = 403 ] && [ \$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $VIEWER' $URL_GK/admin/keys) = 200 ] && [ \$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $VIEWER' -d '$C' $URL_GK/v1/completions) = 403 ]"
st=$(code -H "Authorization: Bearer $ADMIN" -d '{"role":"user","name":"via-api"}' "$URL_GK/admin/keys")
NEWKEY=$($PY -c "import json; print(json.load(open('$TMP/body'))['key'])" 2>/dev/null || true)
check "admin key creates a key through the API (201), and it works" \
  bash -c "[ $st = 201 ] && [ \$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $NEWKEY' -d '$C' $URL_GK/v1/completions) = 200 ]"
"$MT" gateway keys revoke --keys-db "$DB" "$REV" >/dev/null
check "revoked key: 401" [ "$(post "$URL_GK" /v1/completions "$C" "$REV")" = 401 ]
sleep 2.1
check "expired key: 401 (says expired)" \
  bash -c "[ \$(post $URL_GK /v1/completions '$C' $EXP) = 401 ] && grep -q expired $TMP/body"
seq 50 | xargs -P 50 -I{} curl -s -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer $BUDGET" \
  -d "$C" "$URL_GK/v1/completions" > "$TMP/codes"
n200=$(grep -c '^200$' "$TMP/codes" || true); n429=$(grep -c '^429$' "$TMP/codes" || true)
check "50 parallel requests against a budget of 10/min: exactly 10 admitted ($n200 × 200, $n429 × 429)" \
  bash -c "[ $n200 = 10 ] && [ $n429 = 40 ]"
st=$(post "$URL_GK" /v1/completions "$C" "$BUDGET")
check "429 with Retry-After and x-ratelimit-remaining-requests: 0" \
  bash -c "[ $st = 429 ] && [ \"\$(header retry-after)\" -ge 1 ] && [ \"\$(header x-ratelimit-remaining-requests)\" = 0 ] && grep -q rate_limit_exceeded $TMP/body"
kid=$("$MT" gateway keys ls --keys-db "$DB" --json | $PY -c "import json,sys; d=json.load(sys.stdin); d=d.get('keys',d) if isinstance(d,dict) else d; print([k['id'] for k in d if k.get('rpm')==10][0])" 2>/dev/null || echo unknown)
check "/metrics counts them by key id ($kid)" \
  bash -c "[ \$(metric $URL_GK 'minitrain_gateway_rate_limited_total{key=\"$kid\"}' $ADMIN) = 41 ] && [ \$(metric $URL_GK 'minitrain_gateway_requests_total{key=\"$kid\",model=\"m\",upstream=\"f\",code=\"200\"}' $ADMIN) = 10 ]"
stopgw GK

RP=$($PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no >"$TMP/redis.log" 2>&1 &
RPID=$!; PIDS+=($RPID)
for _ in $(seq 50); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
SHARED=$(key --role user --rpm 10)
start_gw GA --keys-db "$DB" --redis "127.0.0.1:$RP" --upstream "f=$URL_F" --route m=f --quiet
start_gw GB --keys-db "$DB" --redis "127.0.0.1:$RP" --upstream "f=$URL_F" --route m=f --quiet
seq 25 | xargs -P 25 -I{} curl -s -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer $SHARED" -d "$C" "$URL_GA/v1/completions" > "$TMP/ca" &
XA=$!
seq 25 | xargs -P 25 -I{} curl -s -o /dev/null -w '%{http_code}\n' -H "Authorization: Bearer $SHARED" -d "$C" "$URL_GB/v1/completions" > "$TMP/cb" &
XB=$!
wait $XA $XB || true
na=$(grep -c '^200$' "$TMP/ca" || true); nb=$(grep -c '^200$' "$TMP/cb" || true)
check "two gateways sharing one redis-server admit 10 together ($na + $nb of 50)" [ $((na + nb)) = 10 ]
stopgw GA; stopgw GB; kill "$RPID" 2>/dev/null || true; wait "$RPID" 2>/dev/null || true

echo "-- a client disconnecting mid-stream"
start_serve S --run "$TMP/slow" --model-name m
ONE=$(key --role user --max-concurrent 1)
start_gw GD --keys-db "$DB" --upstream "s=$URL_S" --route m=s
# The client leaves after its first 10 events (head closes the pipe; curl's next write fails), not
# after a fixed time: on a quiet machine the model can finish 1000 tokens in under 2 s.
{ curl -sN --max-time 10 -H "Authorization: Bearer $ONE" \
  -d '{"model":"m","prompt":"x","max_tokens":1000,"stream":true}' "$URL_GD/v1/completions" \
  | head -n 20 > "$TMP/cut"; } || true
got=$(grep -c '^data: {' "$TMP/cut" || true)
for _ in $(seq 40); do
  [ "$(metric $URL_S minitrain_generations_cancelled_total)" -ge 1 ] && break; sleep 0.1
done
check "the client got part of the stream ($got events), then left: the upstream generation was cancelled" \
  bash -c "[ $got -ge 1 ] && [ \$(metric $URL_S minitrain_generations_cancelled_total) -ge 1 ] && [ \$(metric $URL_S minitrain_slots_busy) = 0 ]"
check "the reservation was released (and the stream counted as cancelled)" \
  bash -c "[ \$(metric $URL_GD 'minitrain_gateway_reservations_total{outcome=\"released\"}' $ADMIN) = 1 ] && [ \$(metric $URL_GD 'minitrain_gateway_reservations_total{outcome=\"settled\"}' $ADMIN) = 0 ] && [ \$(metric $URL_GD minitrain_gateway_streams_cancelled_total $ADMIN) = 1 ]"
check "the key's one concurrency slot is free again: the next request is admitted" \
  [ "$(post "$URL_GD" /v1/completions '{"model":"m","prompt":"x","max_tokens":2}' "$ONE")" = 200 ]
stopgw GD
start_gw GD --upstream "s=$URL_S" --upstream "f=$URL_F" --route m=s,f --quiet
curl -sN --max-time 20 -d '{"model":"m","prompt":"x","max_tokens":1000,"stream":true}' \
  "$URL_GD/v1/completions" > "$TMP/broken" &
CP=$!
for _ in $(seq 100); do [ "$(grep -c '^data: {' "$TMP/broken" || true)" -ge 3 ] && break; sleep 0.05; done
kill9 S
wait "$CP" || true
check "the upstream dies mid-stream: the client gets an in-band error and [DONE], no retry (f never tried)" \
  bash -c "grep -q upstream_stream_broken $TMP/broken && tail -2 $TMP/broken | grep -q '\[DONE\]' && [ \$(metric $URL_GD 'minitrain_gateway_upstream_attempts_total{upstream=\"f\"}') = 0 ] && [ \$(metric $URL_GD minitrain_gateway_streams_broken_total) = 1 ]"
stopgw GD

echo "-- OpenAI's npm client through the gateway"
NODE_DIR=${MT_NODE_DIR:-build/node}
if [ ! -f "$NODE_DIR/node_modules/openai/package.json" ]; then
  mkdir -p "$NODE_DIR"
  [ -f "$NODE_DIR/package.json" ] || echo '{"name":"minitrain-openai-test","private":true}' > "$NODE_DIR/package.json"
  (cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error openai@5 >/dev/null) \
    || { echo "npm install openai failed (is the npm registry reachable?)"; exit 1; }
fi
start_gw GO --keys-db "$DB" --upstream "f=$URL_F" --route m=f --quiet
if MT_NODE_DIR=$NODE_DIR node tests/gateway_openai.js "$URL_GO/v1" "$USER" m > "$TMP/node.out" 2>&1; then
  ok "openai $(sed -n 's/^  "version": "\(.*\)",/\1/p' "$NODE_DIR/node_modules/openai/package.json"): completions, chat, streaming of both, typed errors ($(grep -c '^  ok' "$TMP/node.out") checks)"
else bad "openai client through the gateway:"; cat "$TMP/node.out"; fi
stopgw GO

echo "-- kill -9 of the primary under wrk load"
start_serve F2 --run "$TMP/m" --model-name m
start_serve K --run "$TMP/m" --model-name m
start_gw GW --upstream "k=$URL_K" --upstream "f=$URL_F2" --route m=k,f --quiet
cat > "$TMP/wrk.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"m","prompt":"hello","max_tokens":2}'
function done(summary, latency, requests)
  io.write(string.format("RESULT requests=%d non2xx=%d connect=%d read=%d write=%d timeout=%d max_ms=%.1f p99_ms=%.1f\n",
    summary.requests, summary.errors.status, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.timeout, latency.max / 1000, latency:percentile(99) / 1000))
end
EOF
wrk -t2 -c8 -d4s -s "$TMP/wrk.lua" "$URL_GW/v1/completions" > "$TMP/wrk.out" 2>&1 &
WRK=$!; PIDS+=($WRK)
sleep 1.5
tkill=$(date +%s.%N); kill9 K
wait "$WRK" || true
res=$(grep RESULT "$TMP/wrk.out" || echo "RESULT missing")
tej=$(grep -o '\[[0-9.]*\] upstream k ejected' "$TMP/GW.err" | head -1 | grep -o '[0-9.]*' | head -1 || true)
fo=$($PY -c "print(f'{($tej - $tkill) * 1e3:.0f}')" 2>/dev/null || echo '?')
echo "   wrk: $res; kill -9 → ejection of k: $fo ms"
check "zero client-visible errors while a fallback exists, the dead primary ejected" \
  bash -c "echo '$res' | grep -q 'non2xx=0 connect=0 read=0 write=0 timeout=0' && [ \$(echo '$res' | sed 's/.*requests=\([0-9]*\).*/\1/') -gt 100 ] && [ -n '$tej' ]"
stopgw GW; stop F2 || true; stop F || true; stop A || true

check "no sanitizer or UBSan report from any gateway" \
  bash -c "! grep -l 'Sanitizer\|runtime error' $TMP/G*.err"
finish gateway
