#!/usr/bin/env bash
# tests/run_gateway2.sh — the gateway's spend budgets, load balancing, response cache (in process
# and in Redis), GenAI metrics, hedging and embeddings end to end (issue 31): real `minitrain
# serve` upstreams (--fault-latency makes one slow), real gateways on one keys database, a real
# redis-server, the openai npm client, curl/xargs for concurrency. Every process listens on
# 127.0.0.1 with --port 0 and is stopped by pid. The ledger's calendar reset (an injected clock)
# and its cross-connection atomicity are tests/test_gw_ledger.c.
#
#   bash tests/run_gateway2.sh        # uses ./minitrain; about two minutes
set -euo pipefail
cd "$(dirname "$0")/.."
MT=${MT:-./minitrain}
PY=/usr/bin/python3
. tests/gateway_lib.sh # (sources tests/lib.sh)
tmp_dir mt_gateway2
export TMP

gw_models # $TMP/m (tiny), $TMP/slow
DB=$TMP/keys.db
key() { "$MT" gateway keys add --keys-db "$DB" "$@" | tail -1; }
kid() { "$MT" gateway keys usage --keys-db "$DB" "$1" --json | $PY -c "import json,sys; print(json.load(sys.stdin)['subject'])"; }
usage() { "$MT" gateway keys usage --keys-db "$DB" "$1" --json; }
# usage field: ufield KEY PYEXPR (d = the usage object)
ufield() { usage "$1" | $PY -c "import json,sys; d=json.load(sys.stdin); print($2)"; }
export -f usage ufield; export MT DB PY
C='{"model":"m","prompt":"hello","max_tokens":4}' # worst case: 5 prompt bytes + 4 = 9 tokens

echo "-- budgets: 100 concurrent requests against a budget that fits 10"
ADMIN=$(key --role admin)
BUD=$(key --role user)
"$MT" gateway keys budget --keys-db "$DB" "$BUD" --tokens-per-day 90 >/dev/null
# 2 s in serve before each answer: every one of the 100 is in flight before the first settles
start_serve A --run "$TMP/m" --model-name m --slots 4 --fault-latency 2000
start_gw G1 --keys-db "$DB" --upstream "a=$URL_A" --route m=a --quiet
seq 100 | xargs -P 100 -I{} curl -s -o "$TMP/b1_{}" -w '%{http_code}\n' \
  -H "Authorization: Bearer $BUD" -d "$C" "$URL_G1/v1/completions" > "$TMP/codes"
n200=$(grep -c '^200$' "$TMP/codes" || true); n429=$(grep -c '^429$' "$TMP/codes" || true)
check "exactly 10 admitted, 90 refused with 429 ($n200 × 200, $n429 × 429)" \
  bash -c "[ $n200 = 10 ] && [ $n429 = 90 ]"
real=$($PY -c "
import json, glob
t = 0
for f in glob.glob('$TMP/b1_*'):
    d = json.load(open(f))
    if 'usage' in d: t += d['usage']['prompt_tokens'] + d['usage']['completion_tokens']
print(t)")
check "the ledger settled each row to the upstream's usage ($real tokens in the day), nothing open" \
  bash -c "[ \$(ufield $BUD \"d['day']['tokens']\") = $real ] && [ \$(ufield $BUD \"d['open']\") = 0 ] && [ \$(ufield $BUD \"len([r for r in d['ledger'] if r['state'] == 'settled'])\") = 10 ]"
post "$URL_G1" /v1/completions '{"model":"m","prompt":"hello","max_tokens":90}' "$BUD" >/dev/null
check "a request alone over the whole budget: 400 request_too_large" grep -q request_too_large "$TMP/body"
"$MT" gateway keys budget --keys-db "$DB" "$BUD" --tokens-per-day "$real" >/dev/null
st=$(post "$URL_G1" /v1/completions "$C" "$BUD")
check "a spent budget: 429 insufficient_quota with Retry-After up to the UTC midnight" \
  bash -c "[ $st = 429 ] && grep -q budget_exceeded $TMP/body && [ \"\$(header retry-after)\" -ge 1 ] && [ \"\$(header retry-after)\" -le 86400 ]"
check "/metrics counts the budget refusals (90 + the 400 + the 429)" \
  [ "$(metric "$URL_G1" minitrain_gateway_budget_refused_total "$ADMIN")" = 92 ]
check "keys usage (text) names the window and the budget" \
  bash -c "$MT gateway keys usage --keys-db $DB $BUD | grep -q \"day   $(date -u +%F)  tokens $real of $real\""
stopgw G1

echo "-- two gateways on one keys database"
BUD2=$(key --role user)
"$MT" gateway keys budget --keys-db "$DB" "$BUD2" --tokens-per-month 90 >/dev/null
start_gw GA --keys-db "$DB" --upstream "a=$URL_A" --route m=a --quiet
start_gw GB --keys-db "$DB" --upstream "a=$URL_A" --route m=a --quiet
# one burst of 100, alternating between the two gateways
for _ in $(seq 50); do echo "$URL_GA"; echo "$URL_GB"; done |
  xargs -P 100 -I{} curl -s -o /dev/null -w '%{url_effective} %{http_code}\n' \
    -H "Authorization: Bearer $BUD2" -d "$C" "{}/v1/completions" > "$TMP/cab"
na=$(grep -c "^$URL_GA/.* 200$" "$TMP/cab" || true); nb=$(grep -c "^$URL_GB/.* 200$" "$TMP/cab" || true)
check "two gateways sharing the store admit 10 together ($na through one + $nb through the other, of 100)" \
  bash -c "[ $((na + nb)) = 10 ] && [ \$(grep -c ' 429$' $TMP/cab) = 90 ]"
stopgw GA; stopgw GB; stop A || true

echo "-- cost budgets at the model's prices; a role's budget shared by its keys"
start_serve F --run "$TMP/m" --model-name m
cat > "$TMP/cost.ini" <<EOF
[gateway]
keys_db = $DB
quiet = true
[upstream f]
url = $URL_F
[model m]
targets = f
price_input = 100000
price_output = 200000
EOF
start_gw GP --config "$TMP/cost.ini"
COST=$(key --role user)
"$MT" gateway keys budget --keys-db "$DB" "$COST" --cost-per-day 5 >/dev/null
n=0; st=200
while [ "$st" = 200 ] && [ $n -lt 10 ]; do st=$(post "$URL_GP" /v1/completions "$C" "$COST"); [ "$st" = 200 ] && n=$((n+1)); done
# each request reserves 5 × 0.1 + 4 × 0.2 = 1.3; the ledger's cost must be the tokens at the prices
chk=$(usage "$COST" | $PY -c "
import json, sys
d = json.load(sys.stdin); rows = [r for r in d['ledger'] if r['state'] == 'settled']
want = sum(r['prompt_tokens'] * 0.1 + r['completion_tokens'] * 0.2 for r in rows)
ok = len(rows) == $n and abs(d['day']['cost'] - want) < 1e-9 and d['day']['cost'] + 1.3 > 5 and d['day']['cost'] <= 5
print('%s %.2f' % (ok, d['day']['cost']))")
check "a cost budget of 5 at 0.1/0.2 per token: $n answered, then 429 (${chk#* } spent, each row priced from its tokens)" \
  bash -c "[ $st = 429 ] && grep -q '\"cost\" budget\|budget of 5 cost' $TMP/body && [ '${chk%% *}' = True ]"
A1=$(key --role admin); A2=$(key --role admin)
"$MT" gateway keys budget --keys-db "$DB" role:admin --tokens-per-day 20 >/dev/null
s1=$(post "$URL_GP" /v1/completions "$C" "$A1"); s2=$(post "$URL_GP" /v1/completions "$C" "$A2")
s3=$(post "$URL_GP" /v1/completions "$C" "$A1"); cp "$TMP/body" "$TMP/role429"
"$MT" gateway keys budget --keys-db "$DB" role:admin >/dev/null # all omitted: removed
s4=$(post "$URL_GP" /v1/completions "$C" "$A1")
check "role:admin's 20 tokens a day are shared by its keys: $s1, $s2, then $s3 (the role's budget); removed: $s4" \
  bash -c "[ $s1 = 200 ] && [ $s2 = 200 ] && [ $s3 = 429 ] && grep -q \"role's day budget\" $TMP/role429 && [ $s4 = 200 ]"
stopgw GP; stop F || true

echo "-- streams settle to what was produced, cut streams included"
start_serve F --run "$TMP/m" --model-name m
STR=$(key --role user)
start_gw G2 --keys-db "$DB" --upstream "f=$URL_F" --route m=f --quiet
curl -sN -H "Authorization: Bearer $STR" -d '{"model":"m","prompt":"hi","max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}' "$URL_G2/v1/completions" > "$TMP/s"
su=$($PY -c "
import json
for l in open('$TMP/s'):
    if l.startswith('data: {') and '\"usage\"' in l:
        u = json.loads(l[6:])['usage']; print(u['prompt_tokens'], u['completion_tokens'])")
check "a complete stream: its ledger row holds the usage chunk the client saw ($su)" \
  bash -c "[ \"\$(ufield $STR \"'%d %d %s' % (d['ledger'][0]['prompt_tokens'], d['ledger'][0]['completion_tokens'], d['ledger'][0]['state'])\")\" = '$su settled' ]"
stopgw G2
start_serve S --run "$TMP/slow" --model-name m
start_gw G3 --keys-db "$DB" --upstream "s=$URL_S" --route m=s --quiet
CUT=$(key --role user)
{ curl -sN --max-time 10 -H "Authorization: Bearer $CUT" \
  -d '{"model":"m","prompt":"x","max_tokens":1000,"stream":true}' "$URL_G3/v1/completions" \
  | head -n 20 > "$TMP/cut"; } || true
got=$(grep -c '^data: {' "$TMP/cut" || true)
for _ in $(seq 50); do [ "$(ufield "$CUT" "d['open']")" = 0 ] && break; sleep 0.1; done
row=$(ufield "$CUT" "'%s %d %d %d' % (d['ledger'][0]['state'], d['ledger'][0]['completion_tokens'], d['ledger'][0]['reserved_tokens'], d['day']['tokens'])")
read -r rstate rcomp rres rday <<<"$row"
check "a stream the client left after $got events: settled as cut to $rcomp tokens produced (reserved $rres, charged $rday)" \
  bash -c "[ $rstate = cut ] && [ $rcomp -ge $got ] && [ $rcomp -lt 1000 ] && [ $rday = $((rcomp + 1)) ] && [ $rres = 1001 ]"
stopgw G3; stop S || true; stop F || true

echo "-- load balancing: one upstream 5x slower"
start_serve U1 --run "$TMP/m" --model-name m --fault-latency 40
start_serve U2 --run "$TMP/m" --model-name m --fault-latency 40
start_serve U3 --run "$TMP/m" --model-name m --fault-latency 200
# shares URL : the percentage of attempts each upstream got, "u1 u2 u3"
shares() { $PY - "$1" <<'PYEOF'
import sys, urllib.request
v = {}
for l in urllib.request.urlopen(sys.argv[1] + "/metrics").read().decode().splitlines():
    if l.startswith("minitrain_gateway_upstream_attempts_total{"):
        v[l.split('"')[1]] = float(l.split()[-1])
t = sum(v.values()) or 1
print(" ".join("%d" % round(100 * v.get(u, 0) / t) for u in ("u1", "u2", "u3")))
PYEOF
}
for lb in ewma_latency p2c ordered; do
  cat > "$TMP/lb.ini" <<EOF
[upstream u1]
url = $URL_U1
[upstream u2]
url = $URL_U2
[upstream u3]
url = $URL_U3
[model m]
targets = u1 | u2 | u3
lb = $lb
EOF
  start_gw GL --config "$TMP/lb.ini" --quiet
  seq 120 | xargs -P 4 -I{} curl -s -o /dev/null -d "$C" "$URL_GL/v1/completions"
  read -r s1 s2 s3 <<<"$(shares "$URL_GL")"
  case $lb in
    ordered) check "lb = ordered (weighted random, the default) for comparison: the slow u3 gets ${s3}% (u1 ${s1}%, u2 ${s2}%)" [ "$s3" -ge 20 ] ;;
    *) check "lb = $lb: the 5x slower u3 gets ${s3}% of 120 requests (< 20%; u1 ${s1}%, u2 ${s2}%)" [ "$s3" -lt 20 ] ;;
  esac
  stopgw GL
done
start_gw GR --upstream "u1=$URL_U1" --upstream "u2=$URL_U2" --upstream "u3=$URL_U3" --route 'm=u1|u2|u3' --lb round_robin --quiet
for _ in $(seq 30); do curl -s -o /dev/null -d "$C" "$URL_GR/v1/completions"; done
check "lb = round_robin (the --lb flag): 30 requests, 10 to each ($(shares "$URL_GR"))" [ "$(shares "$URL_GR")" = "33 33 33" ]
stopgw GR; stop U1 || true; stop U2 || true; stop U3 || true
start_serve L1 --run "$TMP/m" --model-name m --fault-latency 4000
start_serve L2 --run "$TMP/m" --model-name m --fault-latency 4000
start_serve L3 --run "$TMP/m" --model-name m --fault-latency 4000
start_gw GB --upstream "l1=$URL_L1" --upstream "l2=$URL_L2" --upstream "l3=$URL_L3" --route 'm=l1|l2|l3' --lb least_busy --quiet
inflight() { for u in l1 l2 l3; do metric "$URL_GB" "minitrain_gateway_upstream_in_flight{upstream=\"$u\"}"; done | tr '\n' ' '; }
spread() { $PY -c "import sys; v=[int(x) for x in sys.argv[1:]]; print(max(v) - min(v), sum(v))" $1; }
# sample once the gateway holds exactly N requests (the curls start late on a loaded machine)
wait_inflight() { for _ in $(seq 100); do [ "$(metric "$URL_GB" minitrain_gateway_requests_in_flight)" = "$1" ] && return; sleep 0.05; done; }
seq 7 | xargs -P 7 -I{} curl -s -o /dev/null -d "$C" "$URL_GB/v1/completions" &
W1=$!
wait_inflight 7; f1=$(inflight)
seq 5 | xargs -P 5 -I{} curl -s -o /dev/null -d "$C" "$URL_GB/v1/completions" &
W2=$!
wait_inflight 12; f2=$(inflight)
wait $W1 $W2 || true
sp1=$(spread "$f1"); sp2=$(spread "$f2")
check "lb = least_busy: in flight within ±1 across upstreams (7 at once: $f1; 5 more: $f2)" \
  bash -c "[ '$sp1' = '1 7' ] && [ '$sp2' = '0 12' ]"
stopgw GB; stop L1 || true; stop L2 || true; stop L3 || true

echo "-- the response cache, and the GenAI metrics"
start_serve F --run "$TMP/m" --model-name m
K1=$(key --role user); K2=$(key --role user)
start_gw GC --keys-db "$DB" --upstream "f=$URL_F" --route m=f --cache-bytes 1M
R0='{"model":"m","prompt":"ROMEO:","max_tokens":12,"temperature":0}'
st1=$(post "$URL_GC" /v1/completions "$R0" "$K1"); cp "$TMP/body" "$TMP/c1"
day1=$(ufield "$K1" "d['day']['tokens']")
st2=$(post "$URL_GC" /v1/completions "$R0" "$K1"); cp "$TMP/body" "$TMP/c2"
check "a repeated temperature-0 request is answered from the cache with the identical body" \
  bash -c "[ $st1 = 200 ] && [ $st2 = 200 ] && cmp -s $TMP/c1 $TMP/c2 && [ \$(grep -c 'cache=hit' $TMP/GC.err) = 1 ] && [ \$(metric $URL_GC 'minitrain_gateway_upstream_attempts_total{upstream=\"f\"}' $K1) = 1 ]"
check "a hit costs the key nothing: its ledger row is 'cached', the day's tokens unchanged ($day1)" \
  bash -c "[ \"\$(ufield $K1 \"d['ledger'][0]['state']\")\" = cached ] && [ \$(ufield $K1 \"d['day']['tokens']\") = $day1 ]"
post "$URL_GC" /v1/completions '{"temperature":0.0,"max_tokens":12,"prompt":"ROMEO:","model":"m"}' "$K1" >/dev/null
check "the same request with its members reordered (and 0 written 0.0) is the same entry" cmp -s "$TMP/c1" "$TMP/body"
for _ in $(seq 40); do post "$URL_GC" /v1/completions "$R0" "$K1" >/dev/null; done
p50=$($PY -c "
import re, statistics
v = [float(m.group(1)) for l in open('$TMP/GC.err') if 'cache=hit' in l for m in [re.search(r' ms=([0-9.]+)', l)] if m]
print('%.3f' % statistics.median(v))")
limit=1.0; case $MT in *asan*) limit=5.0 ;; esac # AddressSanitizer roughly doubles it
check "a hit takes $p50 ms in the gateway (p50 of 42, arrival to answer queued; < $limit ms)" \
  $PY -c "assert $p50 < $limit"
hits=$(metric "$URL_GC" 'minitrain_gateway_cache_requests_total{result="hit"}' "$K1")
post "$URL_GC" /v1/completions "$R0" "$K2" >/dev/null
post "$URL_GC" /v1/completions '{"model":"m","prompt":"ROMEO:","max_tokens":12,"temperature":0,"top_p":0.5}' "$K1" >/dev/null
post "$URL_GC" /v1/completions '{"model":"m","prompt":"ROMEO:","max_tokens":11,"temperature":0}' "$K1" >/dev/null
st=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $K1" -H 'Cache-Control: no-cache' -d "$R0" "$URL_GC/v1/completions")
post "$URL_GC" /v1/completions '{"model":"m","prompt":"ROMEO:","max_tokens":12,"temperature":0.8}' "$K1" >/dev/null
post "$URL_GC" /v1/completions '{"model":"m","prompt":"ROMEO:","max_tokens":12,"temperature":0.8}' "$K1" >/dev/null
check "misses: another key, another top_p, another max_tokens; Cache-Control: no-cache skips it; temperature 0.8 without a seed is never cached ($hits hits before, all 6 went upstream)" \
  bash -c "[ \$(metric $URL_GC 'minitrain_gateway_cache_requests_total{result=\"hit\"}' $K1) = $hits ] && [ \$(metric $URL_GC 'minitrain_gateway_upstream_attempts_total{upstream=\"f\"}' $K1) = 7 ] && [ $st = 200 ]"
S0='{"model":"m","prompt":"hi","max_tokens":8,"stream":true,"seed":5,"temperature":0.7}'
curl -sN -D "$TMP/sh1" -H "Authorization: Bearer $K1" -d "$S0" "$URL_GC/v1/completions" > "$TMP/sc1"
curl -sN -D "$TMP/sh2" -H "Authorization: Bearer $K1" -d "$S0" "$URL_GC/v1/completions" > "$TMP/sc2"
check "a seeded stream is replayed as the same stream (identical events, text/event-stream, [DONE])" \
  bash -c "cmp -s $TMP/sc1 $TMP/sc2 && grep -qi 'content-type: text/event-stream' $TMP/sh2 && tail -2 $TMP/sc2 | grep -q '\[DONE\]' && [ \$(metric $URL_GC 'minitrain_gateway_cache_requests_total{result=\"hit\"}' $K1) = $((hits + 1)) ]"
# 8 answered upstream by user keys: the first miss, 6 misses/skips, 1 stream (hits are not usage)
check "gen_ai_client_token_usage counts the 8 requests answered upstream, input and output, role user" \
  bash -c "[ \$(metric $URL_GC 'gen_ai_client_token_usage_count{gen_ai_request_model=\"m\",gen_ai_token_type=\"input\",role=\"user\"}' $K1) = 8 ] && [ \$(metric $URL_GC 'gen_ai_client_token_usage_count{gen_ai_request_model=\"m\",gen_ai_token_type=\"output\",role=\"user\"}' $K1) = 8 ]"
outsum=$(metric "$URL_GC" 'gen_ai_client_token_usage_sum{gen_ai_request_model="m",gen_ai_token_type="output",role="user"}' "$K1")
check "... its output sum ($outsum) is the completion tokens the gateway counted" \
  [ "$outsum" = "$(metric "$URL_GC" 'minitrain_gateway_completion_tokens_total{model="m"}' "$K1")" ]
check "gen_ai_server_time_to_first_token_seconds has the one stream; operation duration every answer" \
  bash -c "[ \$(metric $URL_GC 'gen_ai_server_time_to_first_token_seconds_count{gen_ai_request_model=\"m\"}' $K1) = 1 ] && [ \$(metric $URL_GC 'gen_ai_client_operation_duration_seconds_count{gen_ai_request_model=\"m\"}' $K1) = 51 ]"
stopgw GC; stop F || true

echo "-- the response cache in Redis: shared by two gateways, expired by TTL"
RP=$($PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no >"$TMP/redis.log" 2>&1 &
RPID=$!; PIDS+=($RPID)
for _ in $(seq 50); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
start_serve F --run "$TMP/m" --model-name m
RK=$(key --role user)
start_gw GRA --keys-db "$DB" --redis "127.0.0.1:$RP" --upstream "f=$URL_F" --route m=f --cache-bytes 1M --cache-ttl-s 2 --quiet
start_gw GRB --keys-db "$DB" --redis "127.0.0.1:$RP" --upstream "f=$URL_F" --route m=f --cache-bytes 1M --cache-ttl-s 2 --quiet
post "$URL_GRA" /v1/completions "$R0" "$RK" >/dev/null; cp "$TMP/body" "$TMP/ra"
post "$URL_GRB" /v1/completions "$R0" "$RK" >/dev/null
check "an answer cached through one gateway is a hit, byte-identical, through the other" \
  bash -c "cmp -s $TMP/ra $TMP/body && [ \$(metric $URL_GRB 'minitrain_gateway_cache_requests_total{result=\"hit\"}' $RK) = 1 ] && [ \$(metric $URL_GRB 'minitrain_gateway_upstream_attempts_total{upstream=\"f\"}' $RK) = 0 ] && [ \$(redis-cli -p $RP --scan --pattern 'mt:cache:*' | wc -l) = 1 ]"
ttl=$(redis-cli -p "$RP" ttl "$(redis-cli -p "$RP" --scan --pattern 'mt:cache:*' | head -1)")
sleep 2.2
post "$URL_GRB" /v1/completions "$R0" "$RK" >/dev/null
check "the entry had a TTL of $ttl s (<= 2); after it, the same request misses and goes upstream" \
  bash -c "[ $ttl -ge 1 ] && [ $ttl -le 2 ] && [ \$(metric $URL_GRB 'minitrain_gateway_cache_requests_total{result=\"miss\"}' $RK) = 1 ] && [ \$(metric $URL_GRB 'minitrain_gateway_upstream_attempts_total{upstream=\"f\"}' $RK) = 1 ]"
kill "$RPID" 2>/dev/null || true; wait "$RPID" 2>/dev/null || true
st=$(post "$URL_GRA" /v1/completions "$R0" "$RK")
check "with Redis gone the cache is a miss, not an error (status $st)" [ "$st" = 200 ]
stopgw GRA; stopgw GRB; stop F || true

echo "-- hedging (bench): 5% of one upstream's requests 10x slower"
start_serve H1 --run "$TMP/m" --model-name m --fault-latency 200 --fault-latency-rate 0.05 --fault-seed 3
start_serve H2 --run "$TMP/m" --model-name m
HS='{"model":"m","prompt":"hi","max_tokens":4,"stream":true,"seed":9,"temperature":0.9}'
curl -sN -d "$HS" "$URL_H2/v1/completions" > "$TMP/h_ref"
start_gw GN --upstream "h1=$URL_H1" --upstream "h2=$URL_H2" --route 'm=h1|h2'
start_gw GH --upstream "h1=$URL_H1" --upstream "h2=$URL_H2" --route 'm=h1|h2' --hedge-after 40
# hbench URL TAG : 300 streamed requests, 4 at a time; each body in $TMP/hb_TAG_i
hbench() {
  seq 300 | xargs -P 4 -I{} curl -sN -o "$TMP/hb_$2_{}" -d "$HS" "$1/v1/completions"
}
hbench "$URL_GN" plain
hbench "$URL_GH" hedged
attempts() { for u in h1 h2; do metric "$1" "minitrain_gateway_upstream_attempts_total{upstream=\"$u\"}"; done | awk '{s += $1} END {print s}'; }
an=$(attempts "$URL_GN"); ah=$(attempts "$URL_GH"); nh=$(metric "$URL_GH" 'minitrain_gateway_hedges_total{model="m"}')
wins=$(metric "$URL_GH" 'minitrain_gateway_hedge_wins_total{model="m"}')
# time to first token as the gateway measures it (the access log's ttft_ms: arrival to the first
# token queued for the client), so the 300 curl processes' own start-up is not in the figure
read -r p99n p99h p50n p50h <<<"$($PY -c "
import re
def q(f, p):
    v = sorted(float(m.group(1)) for l in open(f) for m in [re.search(r' ttft_ms=([0-9.]+)', l)] if m)
    assert len(v) == 300, len(v)
    return v[min(len(v) - 1, int(p * len(v)))]
print('%.1f %.1f %.1f %.1f' % (q('$TMP/GN.err', 0.99), q('$TMP/GH.err', 0.99), q('$TMP/GN.err', 0.5), q('$TMP/GH.err', 0.5)))")"
cut=$($PY -c "print('%.0f' % (100 * (1 - $p99h / $p99n)))"); extra=$($PY -c "print('%.1f' % (100 * ($ah - 300) / 300))")
echo "   p99 TTFT $p99n ms → $p99h ms hedged (p50 $p50n → $p50h ms); $nh hedges, $wins won by the hedge; upstream requests $an → $ah (+$extra%)"
check "hedging cuts p99 time to first token by >= 40% ($cut%) at <= 10% extra upstream requests (+$extra%)" \
  $PY -c "assert $cut >= 40 and $extra <= 10 and $nh > 0 and $wins > 0"
start_gw GQ --upstream "h1=$URL_H1" --upstream "h2=$URL_H2" --route 'm=h1|h2' --hedge-after p95
hbench "$URL_GQ" p95
read -r p99q nq <<<"$($PY -c "
import re
v = sorted(float(m.group(1)) for l in open('$TMP/GQ.err') for m in [re.search(r' ttft_ms=([0-9.]+)', l)] if m)
print('%.1f' % v[int(0.99 * len(v))], len(v))")"
hq=$(metric "$URL_GQ" 'minitrain_gateway_hedges_total{model="m"}')
echo "   hedge_after = p95 (the route's own TTFT histogram): p99 $p99q ms, $hq hedges over $nq streams"
check "hedge_after = p95 hedges once the route has 20 answers, within 10% extra ($hq of 300)" \
  bash -c "[ $hq -gt 0 ] && [ $hq -le 30 ]"
stopgw GQ
dups=$($PY - "$TMP" <<'PYEOF'
import glob, json, sys
def text(f):
    t, done = "", 0
    for l in open(f, encoding="utf-8"):
        if not l.startswith("data: "): continue
        d = l[6:].strip()
        if d == "[DONE]": done += 1; continue
        j = json.loads(d)
        if j.get("choices"): t += j["choices"][0].get("text") or ""
    return t, done
ref = text(sys.argv[1] + "/h_ref")[0]
print(sum(1 for f in glob.glob(sys.argv[1] + "/hb_hedged_*") if text(f) != (ref, 1)))
PYEOF
)
check "no duplicate tokens reach a client: all 300 hedged-gateway streams carry exactly the reference text and one [DONE] ($dups differ)" [ "$dups" = 0 ]
stopgw GH
# two upstreams 20 ms to the first token, a hedge delay of 1 ms: every request is hedged ...
start_serve H3 --run "$TMP/m" --model-name m --fault-latency 20
start_serve H4 --run "$TMP/m" --model-name m --fault-latency 20
start_gw GH --upstream "h3=$URL_H3" --upstream "h4=$URL_H4" --route 'm=h3|h4' --hedge-after 1 --quiet
post "$URL_GH" /v1/completions "$HS" >/dev/null; h1=$(metric "$URL_GH" 'minitrain_gateway_hedges_total{model="m"}')
st=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-Idempotent: false' -d "$HS" "$URL_GH/v1/completions")
h2=$(metric "$URL_GH" 'minitrain_gateway_hedges_total{model="m"}')
check "... ($h1), but not one sent with X-Idempotent: false ($h2 hedges after it, status $st)" \
  bash -c "[ $h1 = 1 ] && [ $h2 = 1 ] && [ $st = 200 ] && grep -q 'hedged to h' $TMP/GH.err"
stopgw GN; stopgw GH; for s in H1 H2 H3 H4; do stop $s || true; done

echo "-- embeddings: serve's POST /v1/embeddings, routed by the gateway, through the openai npm client"
start_serve E --run "$TMP/m" --model-name m
EK=$(key --role user)
cat > "$TMP/emb.ini" <<EOF
[gateway]
keys_db = $DB
cache_bytes = 1M
quiet = true
[upstream e]
url = $URL_E
[model m]
targets = e
[rule secrets]
pattern = (?i)launch\s+codes
on = prompts
EOF
start_gw GE --config "$TMP/emb.ini"
NODE_DIR=${MT_NODE_DIR:-build/node}
if [ ! -f "$NODE_DIR/node_modules/openai/package.json" ]; then
  mkdir -p "$NODE_DIR"
  [ -f "$NODE_DIR/package.json" ] || echo '{"name":"minitrain-openai-test","private":true}' > "$NODE_DIR/package.json"
  (cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error openai@5 >/dev/null) \
    || { echo "npm install openai failed (is the npm registry reachable?)"; exit 1; }
fi
if MT_NODE_DIR=$NODE_DIR node tests/gateway_embeddings.js "$URL_GE/v1" "$EK" m 64 "$TMP/emb.json" > "$TMP/emb.out" 2>&1; then
  ok "openai embeddings.create through the gateway ($(grep -c '^  ok' "$TMP/emb.out") checks)"
else bad "openai embeddings.create through the gateway:"; cat "$TMP/emb.out"; fi
$PY -c "print([[ord(c) for c in 'ROMEO:'], [ord(c) for c in 'hi'], [1, 2, 3]])" > "$TMP/emb_ids.json"
check "the vectors = PyTorch's mean of the last hidden states, L2-normalised ($($PY tests/reference/embed_reference.py "$TMP/m/model.safetensors" "$TMP/emb.json" "$TMP/emb_ids.json" 2>&1 | tail -1))" \
  bash -c "$PY tests/reference/embed_reference.py $TMP/m/model.safetensors $TMP/emb.json $TMP/emb_ids.json >/dev/null"
post "$URL_E" /v1/embeddings '{"model":"m","input":"ROMEO:","encoding_format":"base64"}' >/dev/null; cp "$TMP/body" "$TMP/emb_direct"
post "$URL_GE" /v1/embeddings '{"model":"m","input":"ROMEO:","encoding_format":"base64"}' "$EK" >/dev/null
check "the gateway passes the answer through unchanged; a repeat is a cache hit" \
  bash -c "cmp -s $TMP/body $TMP/emb_direct && [ \$(metric $URL_GE 'minitrain_gateway_cache_requests_total{result=\"hit\"}' $EK) -ge 1 ]"
st=$(post "$URL_GE" /v1/embeddings '{"model":"m","input":["fine","the LAUNCH codes"]}' "$EK")
check "the prompt rules guard an embeddings input too: 400 content_policy_violation" \
  bash -c "[ $st = 400 ] && grep -q content_policy_violation $TMP/body"
st=$(post "$URL_E" /v1/embeddings "{\"model\":\"m\",\"input\":[$(seq -s, 0 128)]}")
check "an input over the context: 400 context_length_exceeded" bash -c "[ $st = 400 ] && grep -q context_length_exceeded $TMP/body"
check "the key's ledger reserved and charged an embedding's 6 prompt tokens (nothing generated)" \
  bash -c "[ \$(ufield $EK \"len([r for r in d['ledger'] if r['state'] == 'settled' and r['reserved_tokens'] == 6 and r['prompt_tokens'] == 6 and r['completion_tokens'] == 0])\") -ge 1 ]"
stopgw GE; stop E || true

check "no sanitizer or UBSan report from any gateway" \
  bash -c "! grep -l 'Sanitizer\|runtime error' $TMP/G*.err"
finish gateway2
