#!/usr/bin/env bash
# tests/run_openai.sh — serve's /v1/chat/completions and its test-only fault flags, end to end,
# driven by OpenAI's official Node.js client (the `openai` npm package) and by plain HTTP.
#
#   - installs `openai@5` with npm into build/node (once; never committed) — needs Node.js >= 18
#     and the npm registry; `make deps` installs nodejs + npm;
#   - the client (tests/openai_client.js) with baseURL + an API key: models, completions, chat
#     completions, streaming of both, typed errors, a 429 with Retry-After, empty 200s;
#   - the fault flags: --fault-rate draws repeat for a seed and hit about P of requests,
#     --fault-status 503/429 with Retry-After, --fault-latency, --fault-empty shapes (completions
#     and chat, plain and streamed); a bad request is still a 400; /health stays truthful.
# Servers listen on --port 0 and are stopped by pid. About 30 s (the npm install, once, ~5 s).
set -euo pipefail
cd "$(dirname "$0")/.."
MT=${MT:-./minitrain}
PY=/usr/bin/python3
NODE_DIR=${MT_NODE_DIR:-build/node}
export MT_NODE_DIR=$NODE_DIR
. tests/lib.sh
tmp_dir mt_openai

command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm are needed (make deps)"; exit 1; }
if [ ! -f "$NODE_DIR/node_modules/openai/package.json" ]; then
  echo "-- installing the openai npm package into $NODE_DIR"
  mkdir -p "$NODE_DIR"
  [ -f "$NODE_DIR/package.json" ] || echo '{"name":"minitrain-openai-test","private":true}' > "$NODE_DIR/package.json"
  (cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error openai@5) \
    || { echo "npm install openai failed (is the npm registry reachable?)"; exit 1; }
fi
echo "   openai $(sed -n 's/^  "version": "\(.*\)",/\1/p' "$NODE_DIR/node_modules/openai/package.json"), node $(node --version)"

# start_server NAME ARGS... : `serve --port 0 ARGS`; sets URL_<NAME>, PID_<NAME> (tests/lib.sh)
start_server() { local name=$1; shift; start_bg "$name" 'serving.*http://127.0.0.1:' "$MT" serve --port 0 "$@"; }
stop_server() {
  local v="PID_$1" rc=0; stop_pid "${!v}" || rc=$?
  [ "$rc" = 0 ] && ok "$1: clean exit after SIGTERM" || bad "$1: exit $rc"
}
code() { curl -s -o "$TMP/body" -w '%{http_code}' "$@"; }

tiny_corpus 200000 "$TMP/data"
"$MT" train --data "$TMP/data" --n-layer 2 --n-head 2 --d-model 64 --seq-len 128 --batch-size 8 \
  --global-batch 8 --steps 30 --run-dir "$TMP/tiny" --threads 1 >"$TMP/train.log"
printf 'sk-openai-test\n' > "$TMP/keys"; chmod 600 "$TMP/keys"

echo "-- the openai npm client against serve (baseURL + API key)"
start_server A --run "$TMP/tiny" --slots 2 --api-key-file "$TMP/keys"
if node tests/openai_client.js api "$URL_A/v1" sk-openai-test tiny > "$TMP/node.out" 2>&1; then
  ok "openai client: $(grep -c '^  ok' "$TMP/node.out") checks (completions, chat, streaming, errors)"
else bad "openai client:"; fi
sed 's/^/   /' "$TMP/node.out"
H="Authorization: Bearer sk-openai-test"
check "GET /v1/chat/completions -> 405 Allow: POST" bash -c "curl -s -D - -o /dev/null -H '$H' $URL_A/v1/chat/completions | tr -d '\r' | grep -q '^Allow: POST'"
check "/metrics counts chat_completions by status" bash -c "curl -s -H '$H' $URL_A/metrics | grep -q 'endpoint=\"chat_completions\",code=\"200\"'"
check "no faults by default (minitrain_faults_injected_total 0)" bash -c "curl -s -H '$H' $URL_A/metrics | grep -q '^minitrain_faults_injected_total 0$'"
stop_server A

echo "-- fault flags (test only)"
statuses() {  # URL N : the status of N sequential chat requests, space-separated
  local s=""
  for _ in $(seq "$2"); do
    s="$s $(curl -s -o /dev/null -w '%{http_code}' "$1/v1/chat/completions" -d '{"messages":[{"role":"user","content":"x"}],"max_tokens":1}')"
  done
  echo "$s"
}
start_server F1 --run "$TMP/tiny" --fault-rate 0.3 --fault-seed 7 --quiet
s1=$(statuses "$URL_F1" 40)
check "--fault-rate: /health stays 200" [ "$(code "$URL_F1/health")" = 200 ]
check "--fault-rate: a bad request is still 400, never a fault" [ "$(code "$URL_F1/v1/chat/completions" -d '{}')" = 400 ]
stop_server F1
start_server F2 --run "$TMP/tiny" --fault-rate 0.3 --fault-seed 7 --quiet
s2=$(statuses "$URL_F2" 40)
stop_server F2
n500=$(echo "$s1" | tr ' ' '\n' | grep -c '^500$' || true)
n200=$(echo "$s1" | tr ' ' '\n' | grep -c '^200$' || true)
check "--fault-rate 0.3: $n500 of 40 are 500, the rest 200 (binomial: 4..20)" [ "$n500" -ge 4 -a "$n500" -le 20 -a $((n500 + n200)) = 40 ]
check "--fault-seed 7 twice: the same sequence of statuses" [ "$s1" = "$s2" ]
start_server F3 --run "$TMP/tiny" --fault-rate 0.3 --fault-seed 8 --quiet
s3=$(statuses "$URL_F3" 40)
stop_server F3
check "another seed: another sequence" [ "$s1" != "$s3" ]

start_server G --run "$TMP/tiny" --fault-status 503 --fault-retry-after 4 --quiet
check "--fault-status 503 alone: every request 503 with Retry-After 4, code injected_fault" bash -c "
  curl -s -D $TMP/h -o $TMP/b $URL_G/v1/completions -d '{\"prompt\":\"a\"}' >/dev/null
  head -1 $TMP/h | grep -q ' 503' && tr -d '\r' < $TMP/h | grep -qi '^Retry-After: 4$' && grep -q injected_fault $TMP/b"
check "--fault-status: /metrics counts the faults" bash -c "curl -s $URL_G/metrics | grep -q '^minitrain_faults_injected_total 1$'"
stop_server G
start_server R --run "$TMP/tiny" --fault-status 429 --fault-retry-after 3 --quiet
if node tests/openai_client.js 429 "$URL_R/v1" none tiny > "$TMP/node429.out" 2>&1; then ok "openai client sees RateLimitError + Retry-After 3"; else bad "429 via openai client"; fi
sed 's/^/   /' "$TMP/node429.out"
stop_server R
start_server E --run "$TMP/tiny" --fault-empty 1 --quiet
if node tests/openai_client.js empty "$URL_E/v1" none tiny > "$TMP/nodee.out" 2>&1; then ok "openai client reads the empty 200 shapes"; else bad "empty via openai client"; fi
sed 's/^/   /' "$TMP/nodee.out"
check "--fault-empty, streamed completion: one chunk of empty text, no finish_reason, then [DONE]" \
  $PY - "$URL_E" <<'PY'
import json, sys, urllib.request
u = sys.argv[1]
body = urllib.request.urlopen(urllib.request.Request(u + "/v1/completions", b'{"prompt":"a","stream":true}')).read().decode()
ev = [e for e in body.split("\n\n") if e]
assert ev[-1] == "data: [DONE]" and len(ev) == 2, ev   # request #4 of this server: variant 1
c = json.loads(ev[0][6:])["choices"][0]
assert c["text"] == "" and c["finish_reason"] is None, c
PY
stop_server E
start_server L --run "$TMP/tiny" --fault-latency 400 --quiet
check "--fault-latency 400: a request takes >= 0.4 s, /health stays fast" $PY - "$URL_L" <<'PY'
import sys, time, urllib.request
u = sys.argv[1]
t0 = time.time(); urllib.request.urlopen(urllib.request.Request(u + "/v1/completions", b'{"prompt":"a","max_tokens":1}')).read(); dt = time.time() - t0
t1 = time.time(); urllib.request.urlopen(u + "/health").read(); dh = time.time() - t1
assert dt >= 0.4 and dh < 0.3, (dt, dh)
PY
stop_server L
check "--fault-rate 2: one clear line, exit 2" bash -c "$MT serve --run $TMP/tiny --fault-rate 2 2>&1 >/dev/null | grep -q 'minitrain: error: --fault-rate'; [ \${PIPESTATUS[0]} = 2 ]"
check "--fault-status 200: refused (400..599), exit 2" bash -c "$MT serve --run $TMP/tiny --fault-status 200 2>&1 >/dev/null | grep -q 'minitrain: error: --fault-status'; [ \${PIPESTATUS[0]} = 2 ]"

finish "openai + faults"
