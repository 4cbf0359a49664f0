#!/usr/bin/env bash
# shellcheck disable=SC2015  # `test && ok || bad`: ok never fails
# tests/run_bad_inputs.sh — what a new user's mistakes do: each bad input found by trying the
# commands as written (the "breaker" pass of 2026-12-01) gives one clear line and a non-zero exit,
# and leaves no file half-written or destroyed. Two tiny single-process runs (2 steps; one stopped by
# a nan at step 1) feed the report cases; everything else needs no training. About 10 s.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
MT=${MT:-./minitrain}
TMP=$(mktemp -d /tmp/mt_bad_inputs_XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$TMP"' EXIT
export MINITRAIN_SHM_DIR="$TMP/shm"
pass=0; fail=0
ok()  { echo "  ok   $1"; pass=$((pass+1)); }
bad() { echo "  FAIL $1"; fail=$((fail+1)); }
# expect_usage NAME CMD...: exit status 2 and exactly one "minitrain: error:" line on stderr
expect_usage() {
  local name=$1; shift
  timeout 30 "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  local n; n=$(grep -c '^minitrain: error: ' "$TMP/err")
  if [ "$rc" -eq 2 ] && [ "$n" -eq 1 ]; then ok "$name (rc 2: $(grep '^minitrain: error: ' "$TMP/err" | cut -c1-90))"
  else bad "$name: rc $rc, $n error lines: $(head -c 300 "$TMP/err")"; fi
}

head -c 20000 examples/data/tinyshakespeare.txt > "$TMP/small.txt"
$MT prepare --input "$TMP/small.txt" --out "$TMP/data" >/dev/null 2>&1
$MT train --data "$TMP/data" --n-layer 1 --n-head 2 --d-model 16 --seq-len 16 --batch-size 2 \
  --global-batch 2 --steps 2 --eval-batches 1 --sample-tokens 4 --threads 1 --ckpt-every 2 \
  --run-dir "$TMP/run" >"$TMP/train.log" 2>&1 || { echo "train failed:"; cat "$TMP/train.log"; exit 1; }

echo "== report: an output never overwrites the run database or the other output"
cp "$TMP/run/run.db" "$TMP/run.db.orig"
expect_usage "report --html DIR/run.db" "$MT" report --run "$TMP/run" --html "$TMP/run/run.db"
expect_usage "report --svg DIR/./run.db" "$MT" report --run "$TMP/run" --svg "$TMP/run/./run.db"
if "$MT" report --run "$TMP/run" >/dev/null 2>&1; then ok "run.db still a readable run database"
else bad "run.db destroyed by report"; fi
expect_usage "report --svg X --html X" "$MT" report --run "$TMP/run" --svg "$TMP/same.x" --html "$TMP/same.x"
[ ! -e "$TMP/same.x" ] && ok "nothing written for clashing outputs" || bad "same.x written"
# an output in a missing directory used to print the whole summary first, then fail naming a .part file
expect_usage "report --json --svg NODIR/x.svg" "$MT" report --run "$TMP/run" --json --svg "$TMP/nodir/x.svg"
[ ! -s "$TMP/out" ] && grep -q "cannot write into directory '$TMP/nodir'" "$TMP/err" && ok "... fails before the summary, names the directory" || bad "report into a missing dir: $(head -c 200 "$TMP/err")"

echo "== report --svg of a run with no step logged: a picture that says so, exit 0 (as --html)"
"$MT" train --data "$TMP/data" --n-layer 1 --n-head 2 --d-model 16 --seq-len 16 --batch-size 2 --global-batch 2 \
  --steps 2 --eval-batches 1 --sample-tokens 0 --threads 1 --fault nan@step=1 --run-dir "$TMP/nosteps" >/dev/null 2>&1
timeout 30 "$MT" report --run "$TMP/nosteps" --svg "$TMP/nosteps.svg" >"$TMP/out" 2>"$TMP/err"; rc=$?
if [ $rc = 0 ] && grep -q "nothing to plot" "$TMP/nosteps.svg" && grep -q "nosteps.svg (no losses logged" "$TMP/out" \
   && /usr/bin/python3 -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$TMP/nosteps.svg"; then
  ok "report --svg with no steps: exit 0, a valid SVG saying nothing to plot"
else bad "report --svg with no steps: rc $rc: $(cat "$TMP/err")"; fi

echo "== sample of a killed run (checkpoints, no final model): the tokenizer is in the run directory"
# the save of step 6 waits for step 4's: step 4 is committed when step 8 kills the run
{ timeout 60 "$MT" train --data "$TMP/data" --n-layer 1 --n-head 2 --d-model 16 --seq-len 16 --batch-size 2 --global-batch 2 \
  --steps 10 --eval-batches 1 --sample-tokens 0 --threads 1 --ckpt-every 2 --fault kill@step=8 --run-dir "$TMP/killed" >/dev/null 2>&1; } 2>/dev/null
timeout 30 "$MT" sample --run "$TMP/killed" --prompt ab --max-tokens 3 >"$TMP/out" 2>"$TMP/err"; rc=$?
[ ! -e "$TMP/killed/model.safetensors" ] && [ $rc = 0 ] && [ -s "$TMP/out" ] && ok "sample of a killed run: its newest checkpoint, decoded" \
  || bad "sample of a killed run: rc $rc: $(head -c 200 "$TMP/err")"

echo "== sample --max-tokens: bounded (1..1000000), not an endless generation"
expect_usage "sample --max-tokens 0" "$MT" sample --run "$TMP/run" --max-tokens 0
expect_usage "sample --max-tokens 1000001" "$MT" sample --run "$TMP/run" --max-tokens 1000001
grep -q "in \[1, 1000000\]" "$TMP/err" && [ ! -s "$TMP/out" ] && ok "... names the range, generates nothing" || bad "sample bound: $(cat "$TMP/err")"

echo "== train --config of a binary file: the offending line escaped (\\xNN) and cut, never raw bytes"
printable() { ! LC_ALL=C grep -q '[^ -~]' "$TMP/err"; } # every byte of stderr printable ASCII (newline aside)
printf '\x7fELF\x02\x01\x01\x03\xff%s\n' "$(printf 'x%.0s' $(seq 200))" > "$TMP/bin.ini"
expect_usage "train --config BINARY (malformed first line)" "$MT" train --config "$TMP/bin.ini"
printable && grep -q "bin.ini:1: malformed line '\\\\x7fELF\\\\x02" "$TMP/err" && [ "$(wc -c < "$TMP/err")" -lt 220 ] \
  && ok "... escaped, cut to ~80 characters" || bad "binary config line: $(head -c 300 "$TMP/err" | od -c | head -3)"
printf 'n_layer = 2\nzz\x01\xff = 5\n' > "$TMP/bin2.ini"
expect_usage "train --config with a binary key" "$MT" train --config "$TMP/bin2.ini"
printable && grep -q "unknown config key 'zz\\\\x01\\\\xff'" "$TMP/err" && ok "... the key escaped" || bad "binary key: $(od -c "$TMP/err" | head -3)"
printf 'device = \xff\x1b[31m\n' > "$TMP/bin3.ini"
expect_usage "train --config with a binary string value" "$MT" train --config "$TMP/bin3.ini" --data "$TMP/data"
printable && grep -q "got '\\\\xff\\\\x1b\[31m'" "$TMP/err" && ok "... the value escaped" || bad "binary value: $(od -c "$TMP/err" | head -3)"

echo "== train name = ../x: the default run directory runs/<name> never leaves runs/"
printf 'name = ../../escaped\n' > "$TMP/up.ini"
mkdir -p "$TMP/cwd/sub"; MTABS=$(realpath "$MT"); cd "$TMP/cwd/sub" || exit 1 # runs/../../escaped = $TMP/cwd/escaped
expect_usage "train name = ../../escaped" "$MTABS" train --config "$TMP/up.ini" --data "$TMP/data" --steps 1
cd - >/dev/null || exit 1
grep -q "'name' = '../../escaped' must be a plain name" "$TMP/err" && [ ! -e "$TMP/cwd/escaped" ] && ok "... refused by name, nothing created outside runs/" || bad "name traversal: $(cat "$TMP/err")"
echo "== train --ckpt-tier0-root: a root that cannot be created is refused at start"
TRAIN=(--data "$TMP/data" --n-layer 1 --n-head 2 --d-model 16 --seq-len 16 --batch-size 2 --global-batch 2
       --steps 2 --eval-batches 1 --sample-tokens 4 --threads 1 --ckpt-every 1)
touch "$TMP/afile"
expect_usage "train --ckpt-tier0-root under a regular file" "$MT" train "${TRAIN[@]}" --ckpt-tier0-root "$TMP/afile/%n" --run-dir "$TMP/t0bad"
expect_usage "train --ckpt-tier0-root %n with MINITRAIN_NODE=.." env MINITRAIN_NODE=.. "$MT" train "${TRAIN[@]}" --ckpt-tier0-root "$TMP/t0/%n" --run-dir "$TMP/t0dots"
# refused before training: no checkpoint at all; and none beside $TMP/t0 (where "$TMP/t0/.." points)
[ ! -e "$TMP/t0bad/ckpt" ] && ok "nothing trained or saved under a bad root" || bad "the run trained on"
escaped=$(find "$TMP" -maxdepth 2 -path "$TMP/*-*/ckpt" 2>/dev/null)
[ -z "$escaped" ] && ok "no tier 0 written outside its root" || bad "tier 0 written outside its root: $escaped"

echo "== train: option combinations that cannot work are refused"
expect_usage "train --ckpt-replicas 1 --ckpt-tier0 0 (replicas live in tier 0)" "$MT" train "${TRAIN[@]}" --ckpt-replicas 1 --ckpt-tier0 0 --run-dir "$TMP/repl"
grep -q "ckpt_replicas = 1 needs ckpt_tier0 = 1" "$TMP/err" && [ ! -e "$TMP/repl" ] && ok "... names both options, nothing trained" || bad "replicas without tier 0: $(cat "$TMP/err")"

echo "== ckpt export: --out never replaces the run's own files"
expect_usage "ckpt export --out DIR/run.db" "$MT" ckpt export --run "$TMP/run" --out "$TMP/run/run.db"
expect_usage "ckpt export --out DIR/model.safetensors" "$MT" ckpt export --run "$TMP/run" --out "$TMP/run/./model.safetensors"
"$MT" report --run "$TMP/run" >/dev/null 2>&1 && ok "run.db still a run database after the refused exports" || bad "run.db destroyed by ckpt export"
"$MT" ckpt export --run "$TMP/run" --out "$TMP/hf/model.safetensors" >/dev/null 2>&1 && [ -s "$TMP/hf/config.json" ] \
  && ok "ckpt export elsewhere still works" || bad "ckpt export to a fresh directory failed"
# a missing --step used to name only tier 0's /dev/shm root, not RUN/ckpt where the user looks
for sub in "export --out $TMP/s3.st" verify; do
  # shellcheck disable=SC2086  # $sub: the subcommand and its options
  expect_usage "ckpt ${sub%% *} --step 3 (only step 2 saved)" "$MT" ckpt $sub --run "$TMP/run" --step 3
  grep -q "step 3 in .*$TMP/run/ckpt (committed steps: 2)" "$TMP/err" && ok "... names RUN/ckpt and the steps there" || bad "ckpt $sub step 3: $(cat "$TMP/err")"
done

echo "== plan --topology: a file's mistakes are named; a big file is read in well under a second"
topo() { printf '%b' "$1" > "$TMP/topo.ini"; expect_usage "$2" "$MT" plan --topology "$TMP/topo.ini" --tp 2 --pp 1 --dp 1; }
topo '[node a]\ngpus = 2\n[node a]\ngpus = 4\n' "the same [node a] twice in a row"
topo '[node a b]\ngpus = 2\n' "a host name with a space (would break the rankfile)"
topo '[nodes g]\ncount = 2000000\ngpus = 8\n' "2M hosts (more than plan --nodes allows)"
expect_usage "plan --topology DIR" "$MT" plan --topology "$TMP" --tp 2 --pp 1 --dp 1
grep -q "is a directory, not a topology file" "$TMP/err" && ok "... says it is a directory" || bad "topology dir: $(cat "$TMP/err")"
# a header without ']' used to be blamed on the next line's key ("[fabric]: unknown key 'gpus'")
printf '[node a]\ngpus = 2\n[node b\ngpus = 2\n' > "$TMP/topo.ini"
timeout 30 "$MT" plan --topology "$TMP/topo.ini" --tp 2 --pp 1 --dp 1 >/dev/null 2>"$TMP/err"
grep -q "topo.ini:3: cannot parse '\[node b'" "$TMP/err" && ok "unterminated header named with its line" || bad "unterminated header: $(cat "$TMP/err")"
printf '\x01\xff binary\n' > "$TMP/topo.ini"
timeout 30 "$MT" plan --topology "$TMP/topo.ini" --tp 1 --pp 1 --dp 1 >/dev/null 2>"$TMP/err"
grep -q "cannot parse '\\\\x01\\\\xff binary'" "$TMP/err" && ! LC_ALL=C grep -q '[^ -~]' "$TMP/err" && ok "a binary line is shown escaped" || bad "binary topology line: $(od -c "$TMP/err" | head -3)"
# inih cuts a section name at 49 characters: a 63-character host (the limit) used to reach the rankfile cut
long=$(printf 'h%.0s' $(seq 63))
printf '[node %s]\ngpus = 2\n' "$long" > "$TMP/topo.ini"
timeout 30 "$MT" plan --topology "$TMP/topo.ini" --tp 2 --pp 1 --dp 1 --out "$TMP/long.rf" >/dev/null 2>"$TMP/err"
grep -q "^rank 0=$long slot=0" "$TMP/long.rf" 2>/dev/null && ok "a 63-character host name reaches the rankfile whole" || bad "63-character host: $(cat "$TMP/err") $(grep -m1 '^rank 0' "$TMP/long.rf" 2>/dev/null)"
topo "[node ${long}x]\ngpus = 2\n" "a 64-character host name"
grep -q "at most 63 characters" "$TMP/err" && ok "... names the limit" || bad "64-character host: $(cat "$TMP/err")"
expect_usage "plan --dp 0 --ep 4 where only dp 2 fits" "$MT" plan --nodes 2 --gpus-per-node 8 --tp 8 --pp 1 --dp 0 --ep 4
grep -q 'fewer than ep 4' "$TMP/err" && ok "... says ep is the reason" || bad "dp 0 / ep: $(cat "$TMP/err")"
expect_usage "plan --spares 5 on 2 nodes" "$MT" plan --nodes 2 --gpus-per-node 8 --tp 8 --pp 1 --dp 0 --spares 5
grep -q -- '-[0-9]* usable' "$TMP/err" && bad "negative GPU count: $(cat "$TMP/err")" || ok "... no negative GPU count"
printf '[node a]\ngpus = 2\n' > "$TMP/topo.ini"; cp "$TMP/topo.ini" "$TMP/topo.orig"
expect_usage "plan --out = --topology" "$MT" plan --topology "$TMP/topo.ini" --tp 2 --pp 1 --dp 1 --out "$TMP/./topo.ini"
cmp -s "$TMP/topo.ini" "$TMP/topo.orig" && ok "... the topology file left intact" || bad "the topology file was replaced by the rankfile"
# 200,000 hosts, a leaf per host: the duplicate check and the leaf names used to be quadratic
# (20,000 hosts took 4.7 s; 1M never finished)
printf '[nodes g]\ncount = 200000\ngpus = 8\nnodes_per_leaf = 1\n' > "$TMP/big.ini"
start=$(date +%s%N)
if timeout 60 "$MT" plan --topology "$TMP/big.ini" --tp 8 --pp 1 --dp 2 --quiet >/dev/null 2>&1; then
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  [ "$ms" -lt 5000 ] && ok "200,000-host file planned in $ms ms" || bad "200,000-host file took $ms ms"
else bad "200,000-host file: plan failed or timed out"; fi

echo "== run/train --rankfile: a slot past the host's slot count (hostfile, topology) is refused before launch"
printf 'a slots=2\n' > "$TMP/hosts"
printf '# minitrain plan: tp=2 pp=1 dp=1 ep=1 world=2\nrank 0=a slot=0\nrank 1=a slot=2\n' > "$TMP/slot.rf"
expect_usage "run --rankfile with slot=2 on a 2-slot host" "$MT" run --run-dir "$TMP/slotrun" --hostfile "$TMP/hosts" --rankfile "$TMP/slot.rf" -- /bin/true
grep -q "rank 1 on host a slot 2, but a has 2 slots" "$TMP/err" && ok "... names the rank, host, slot and count" || bad "slot past the host: $(cat "$TMP/err")"
printf '[node a]\ngpus = 2\n' > "$TMP/topo_a.ini"
expect_usage "train --rankfile with slot=2 on a 2-GPU host of --topology" "$MT" train "${TRAIN[@]}" --rankfile "$TMP/slot.rf" --topology "$TMP/topo_a.ini" --run-dir "$TMP/slottrain"
grep -q "but a has 2 slots (0..1) in the topology" "$TMP/err" && [ ! -e "$TMP/slottrain" ] && ok "... names the topology's count, nothing trained" || bad "train slot past the host: $(cat "$TMP/err")"

echo "== scrub: a bad --report fails before anything is written; it never overwrites --input/--out"
printf 'Mail juliet@verona.it now\n' > "$TMP/pii.txt"; cp "$TMP/pii.txt" "$TMP/pii.orig"
expect_usage "scrub --report in a missing directory" "$MT" scrub --input "$TMP/pii.txt" --out "$TMP/clean.txt" --report "$TMP/nodir/r.json"
[ ! -e "$TMP/clean.txt" ] && ok "no --out committed when --report cannot be written" || bad "--out committed although the command failed"
expect_usage "scrub --report = --input" "$MT" scrub --input "$TMP/pii.txt" --out "$TMP/clean.txt" --report "$TMP/pii.txt"
cmp -s "$TMP/pii.txt" "$TMP/pii.orig" && ok "--input left intact" || bad "--input overwritten by the report"
expect_usage "scrub --report = --out (new file)" "$MT" scrub --input "$TMP/pii.txt" --out "$TMP/c2.txt" --report "$TMP/c2.txt"

echo "== gateway: the same --upstream or --route name twice is refused, not silently replaced"
expect_usage "gateway --upstream a=.. --upstream a=.." "$MT" gateway --port 0 --upstream a=http://127.0.0.1:1 --upstream a=http://127.0.0.1:2 --route m=a
expect_usage "gateway --route m=a --route m=b" "$MT" gateway --port 0 --upstream a=http://127.0.0.1:1 --upstream b=http://127.0.0.1:2 --route m=a --route m=b
grep -q "route m is given twice ('m=a' and 'm=b')" "$TMP/err" && ok "... names both" || bad "route twice: $(cat "$TMP/err")"

echo "== run -- a command that does not exist: refused at once, not restarted max-restarts times"
expect_usage "run -- $TMP/no/such/bin" "$MT" run --run-dir "$TMP/sup_noexec" --max-restarts 3 -- "$TMP/no/such/bin"
expect_usage "run -- no_such_cmd_mt (PATH)" "$MT" run --run-dir "$TMP/sup_noexec" --max-restarts 3 -- no_such_cmd_mt
grep -q "cannot execute 'no_such_cmd_mt': not found in PATH" "$TMP/err" && ! grep -q "attempt 1" "$TMP/err" && ok "... names it, launches nothing" || bad "run of a missing command: $(head -c 300 "$TMP/err")"

echo "== README: its supervisor line runs as written (the supervisor needs the run directory)"
line=$(grep -m1 -E '^ *\./minitrain run .* -- ' README.md | sed 's/^ *//')
run_dir=$(sed -n 's/.*--run-dir \([^ ]*\).*/\1/p' <<<"$line")
if [ -n "$run_dir" ]; then
  # the same line on the tiny model: --config and --run-dir swapped for the test's own
  rest=${line#*-- ./minitrain train }; rest=${rest/--config examples\/shakespeare.ini/}; rest=${rest/--run-dir $run_dir/}
  # shellcheck disable=SC2086
  timeout 60 "$MT" run --max-restarts 1 -- "$MT" train "${TRAIN[@]}" $rest --run-dir "$TMP/readme_run" >"$TMP/out" 2>&1 \
    && ok "README's minitrain run line trains (with --run-dir $run_dir)" || bad "README's run line: $(tail -2 "$TMP/out")"
else bad "README's minitrain run line has no --run-dir: \`minitrain run\` refuses it"; fi

echo "== one output rule (core/fs fs_check_output): never a FIFO, device, link, nor inside a checkpoint"
mkfifo "$TMP/fifo"; ln -s "$TMP/linked.st" "$TMP/link.st"
expect_usage "ckpt export --out FIFO" "$MT" ckpt export --run "$TMP/run" --out "$TMP/fifo"
[ -p "$TMP/fifo" ] && [ ! -e "$TMP/config.json" ] && ok "... the FIFO is still a FIFO, no config.json beside it" || bad "FIFO replaced"
expect_usage "ckpt export --out /dev/null" "$MT" ckpt export --run "$TMP/run" --out /dev/null
[ -c /dev/null ] && ok "... /dev/null is still a device" || bad "/dev/null replaced by a regular file"
expect_usage "ckpt export --out SYMLINK" "$MT" ckpt export --run "$TMP/run" --out "$TMP/link.st"
[ -L "$TMP/link.st" ] && [ ! -e "$TMP/linked.st" ] && ok "... the link is still a link" || bad "symlink replaced"
shard=$(ls "$TMP/run/ckpt/step_00000002/"model-*.safetensors | head -1)
expect_usage "ckpt export --out RUN/ckpt/step_N/<shard>" "$MT" ckpt export --run "$TMP/run" --out "$shard"
expect_usage "report --svg RUN/ckpt/step_N/manifest.json" "$MT" report --run "$TMP/run" --svg "$TMP/run/ckpt/step_00000002/manifest.json"
expect_usage "report --html RUN/ckpt/x.html (a tier root)" "$MT" report --run "$TMP/run" --html "$TMP/run/./ckpt/x.html"
grep -q "lies inside $TMP/run/ckpt" "$TMP/err" && ok "... names the tier root" || bad "tier root: $(cat "$TMP/err")"
"$MT" ckpt verify --run "$TMP/run" >/dev/null 2>&1 && ok "ckpt verify still passes after the refused outputs" || bad "a committed checkpoint was overwritten"
expect_usage "scrub --out SYMLINK" "$MT" scrub --input "$TMP/pii.txt" --out "$TMP/link.st"
expect_usage "plan --out FIFO" "$MT" plan --nodes 1 --gpus-per-node 2 --tp 2 --pp 1 --dp 1 --out "$TMP/fifo"
timeout 10 "$MT" scrub --input "$TMP/pii.txt" --out /dev/null --quiet && ok "scrub still streams into /dev/null in place" || bad "scrub --out /dev/null"

echo "== ckpt export (hf) of an MoE run is refused as llmc's is; the hf pair is written both or neither"
"$MT" train "${TRAIN[@]}" --n-layer 2 --moe-every 2 --n-experts 2 --top-k 1 --sample-tokens 0 --ckpt-every 2 --run-dir "$TMP/moe" >/dev/null 2>&1
expect_usage "ckpt export (hf) of an MoE run" "$MT" ckpt export --run "$TMP/moe"
grep -q "no mixture-of-experts layers" "$TMP/err" && [ ! -e "$TMP/moe/hf" ] && ok "... says why, writes nothing (no empty hf/)" || bad "MoE hf export: $(cat "$TMP/err"); $(ls "$TMP/moe")"
cc -shared -fPIC -O2 -Wall -Wextra -Werror -o "$TMP/enospc.so" tests/enospc_shim.c -ldl
MT_ENOSPC_MATCH=pair/model.safetensors LD_PRELOAD="$TMP/enospc.so" "$MT" ckpt export --run "$TMP/run" --out "$TMP/pair/model.safetensors" >/dev/null 2>"$TMP/err"; rc=$?
[ $rc != 0 ] && [ ! -e "$TMP/pair" ] && ok "a full disk during ckpt export leaves neither file nor an empty directory (rc $rc)" || bad "full-disk export: rc $rc, left $(ls "$TMP/pair" 2>&1)"
"$MT" ckpt export --run "$TMP/run" --out "$TMP/pair2/model.safetensors" >/dev/null 2>&1
cp "$TMP/pair2/config.json" "$TMP/pair2.cfg"
MT_ENOSPC_MATCH=pair2/model.safetensors LD_PRELOAD="$TMP/enospc.so" "$MT" ckpt export --run "$TMP/run" --out "$TMP/pair2/model.safetensors" >/dev/null 2>&1
[ "$(ls "$TMP/pair2")" = "$(printf 'config.json\nmodel.safetensors')" ] && cmp -s "$TMP/pair2/config.json" "$TMP/pair2.cfg" && ok "... and a previous pair stays whole, no partial files" || bad "previous pair: $(ls "$TMP/pair2")"
MT_ENOSPC_MATCH=rep.json LD_PRELOAD="$TMP/enospc.so" "$MT" scrub --input "$TMP/pii.txt" --out "$TMP/scrubbed.txt" --report "$TMP/rep.json" --quiet 2>"$TMP/err"; rc=$?
[ $rc = 4 ] && grep -q "is complete" "$TMP/err" && [ ! -e "$TMP/rep.json" ] && ok "scrub --report on a full disk: exit 4 (I/O), not 2 (usage), and says --out is complete" || bad "scrub report full disk: rc $rc $(cat "$TMP/err")"
MT_ENOSPC_MATCH=full.svg LD_PRELOAD="$TMP/enospc.so" "$MT" report --run "$TMP/run" --svg "$TMP/full.svg" >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 4 ] && ok "report --svg on a full disk: exit 4 (I/O)" || bad "report svg full disk: rc $rc $(cat "$TMP/err")"

echo "== robust --eps / robust_eps: bounded to [0, 100] like adv_eps, one grammar (no empty item)"
for e in 1e20 1e37 0.1, ,0.1 0.1,,0.2; do
  expect_usage "robust --eps $e" "$MT" robust --run "$TMP/run" --eps "$e" --no-db
done
for a in pgd fgsm; do
  timeout 60 "$MT" robust --run "$TMP/run" --attack $a --norm l2 --eps 100 --batches 1 --no-db --json >"$TMP/out" 2>"$TMP/err"; rc=$?
  [ $rc = 0 ] && /usr/bin/python3 -c "import json,sys,math; r=json.load(open(sys.argv[1]))['rows'][0]; assert math.isfinite(r['adv_loss']) and r['adv_loss'] >= r['clean_loss'] - 1e-6, r" "$TMP/out" 2>>"$TMP/err" \
    && ok "robust --attack $a --eps 100 (the bound): a finite row, adv >= clean" || bad "robust $a eps 100: rc $rc $(head -c 300 "$TMP/err")"
done
expect_usage "train robust_every with robust_eps 1e20: refused before training" "$MT" train "${TRAIN[@]}" --robust-every 1 --robust-eps 1e20 --run-dir "$TMP/reps"
[ ! -e "$TMP/reps/run.db" ] && ok "... nothing trained" || bad "trained with robust_eps 1e20"
expect_usage "train robust_attack hotflip, robust_flips 1000 > seq_len 16" "$MT" train "${TRAIN[@]}" --robust-every 1 --robust-attack hotflip --robust-flips 1000 --run-dir "$TMP/rflip"
expect_usage "robust --attack hotflip --flips 1000 on 16-token sequences" "$MT" robust --run "$TMP/run" --attack hotflip --flips 1000 --no-db
"$MT" train "${TRAIN[@]}" --ckpt-every 0 --robust-every 2 --robust-attack hotflip --robust-flips 2 --robust-batches 1 --run-dir "$TMP/rhot" >"$TMP/out" 2>&1
grep -q "robust hotflip: flips 2 adv" "$TMP/out" && ! grep -q "robust hotflip.* eps " "$TMP/out" && ok "robust_every with hotflip logs its flips, not 'eps 0'" || bad "hotflip log: $(grep robust "$TMP/out")"

echo "== train --data: a missing path says so; a pattern without a split warns and the shards are logged"
expect_usage "train --data MISSING" "$MT" train "${TRAIN[@]}" --data "$TMP/no_such_data" --run-dir "$TMP/nd"
grep -q "no such data: '$TMP/no_such_data'" "$TMP/err" && ! grep -q tokenizer "$TMP/err" && ok "... 'no such data', not 'no tokenizer'" || bad "missing data: $(cat "$TMP/err")"
"$MT" train "${TRAIN[@]}" --data "$TMP/data/*_000.bin" --ckpt-every 0 --run-dir "$TMP/samesplit" >"$TMP/out" 2>&1
grep -q "the train and val splits read the same files" "$TMP/out" && ok "a --data pattern without train/val/{split} warns that both splits read the same files" || bad "no same-split warning: $(head -c 300 "$TMP/out")"
"$MT" train "${TRAIN[@]}" --ckpt-every 0 --run-dir "$TMP/splitlog" >"$TMP/out" 2>&1
grep -q "data: train '$TMP/data/train_000.bin' | val '$TMP/data/val_000.bin'" "$TMP/out" && grep -q "tokenizer: $TMP/data/tokenizer.bin (byte" "$TMP/out" \
  && ok "the log names the shards of each split and the tokenizer in use" || bad "split/tokenizer log: $(grep -E 'data:|tokenizer' "$TMP/out")"

echo "== train --init-from: the experts and the tokenizer come from the source; a contradiction is refused"
expect_usage "--init-from a dense run with --moe-every 2" "$MT" train "${TRAIN[@]}" --init-from "$TMP/run" --moe-every 2 --run-dir "$TMP/ft_moe"
grep -q "dense model (no experts)" "$TMP/err" && ok "... says the source is dense" || bad "dense source: $(cat "$TMP/err")"
expect_usage "--init-from an MoE run (2 experts) with --n-experts 8" "$MT" train "${TRAIN[@]}" --init-from "$TMP/moe" --n-experts 8 --run-dir "$TMP/ft_moe2"
"$MT" train "${TRAIN[@]}" --init-from "$TMP/moe" --ckpt-every 0 --run-dir "$TMP/ft_moe3" >"$TMP/out" 2>&1
grep -q "MoE every 2 blocks, 2 experts, top-1" "$TMP/out" && ok "--init-from an MoE run logs the experts it takes" || bad "MoE init log: $(grep init_from "$TMP/out")"
"$MT" prepare --input "$TMP/small.txt" --out "$TMP/bpe" --tokenizer bpe --vocab-size 300 >/dev/null 2>&1
expect_usage "--init-from a byte-tokenizer run on BPE data" "$MT" train "${TRAIN[@]}" --data "$TMP/bpe" --init-from "$TMP/run" --run-dir "$TMP/ft_tok"
grep -q "is not the source run's .*differ at id 256" "$TMP/err" && [ ! -e "$TMP/ft_tok/run.db" ] && ok "... names both tokenizers and the first differing id" || bad "tokenizer mismatch: $(cat "$TMP/err")"

echo "== robust of a run trained on token ids only (no tokenizer.bin): the attacks need none"
mkdir -p "$TMP/ids"; cp "$TMP/data/train_000.bin" "$TMP/data/val_000.bin" "$TMP/ids/"
"$MT" train "${TRAIN[@]}" --data "$TMP/ids" --vocab-size 256 --ckpt-every 0 --run-dir "$TMP/idrun" >/dev/null 2>&1
timeout 60 "$MT" robust --run "$TMP/idrun" --eps 0,0.1 --batches 1 --no-db >"$TMP/out" 2>"$TMP/err"; rc=$?
[ ! -e "$TMP/idrun/tokenizer.bin" ] && [ $rc = 0 ] && grep -q "attacking token ids" "$TMP/err" && ok "robust on ids: a table, and it says so" || bad "robust on ids: rc $rc $(head -c 300 "$TMP/err")"
timeout 60 "$MT" robust --run "$TMP/idrun" --tokenizer "$TMP/data/tokenizer.bin" --attack hotflip --batches 1 --no-db >/dev/null 2>"$TMP/err" \
  && ok "robust --tokenizer FILE" || bad "robust --tokenizer: $(head -c 300 "$TMP/err")"

echo "== ckpt import / readers: the source itself is named first, and what it is when it is the wrong kind"
expect_usage "ckpt import --from hf MISSING_DIR" "$MT" ckpt import --from hf "$TMP/no_hf" --out "$TMP/imp1"
grep -q "'$TMP/no_hf': No such file or directory" "$TMP/err" && ! grep -q "$TMP/config.json" "$TMP/err" && ok "... names the missing source, not a config.json in its parent" || bad "hf missing: $(cat "$TMP/err")"
expect_usage "ckpt import --from llmc DIR" "$MT" ckpt import --from llmc "$TMP/data" --out "$TMP/imp2"
grep -q "is a directory, not a file" "$TMP/err" && ! grep -q truncated "$TMP/err" && ok "... 'is a directory', not 'truncated (4096 bytes)'" || bad "llmc dir: $(cat "$TMP/err")"
expect_usage "ckpt import --from llmc FILE.safetensors" "$MT" ckpt import --from llmc "$TMP/run/model.safetensors" --out "$TMP/imp3"
grep -q "it is a safetensors file: import it with --from hf" "$TMP/err" && ok "... names the format it found" || bad "llmc of safetensors: $(cat "$TMP/err")"
mkdir -p "$TMP/hfcfgdir/config.json"; cp "$TMP/run/model.safetensors" "$TMP/hfcfgdir/"
expect_usage "ckpt import --from hf DIR whose config.json is a directory" "$MT" ckpt import --from hf "$TMP/hfcfgdir" --out "$TMP/imp4"
grep -q "config.json' is a directory, not a file" "$TMP/err" && ok "... says config.json is a directory" || bad "config.json dir: $(cat "$TMP/err")"
mkdir -p "$TMP/dshards/train_x.bin"
expect_usage "train --data PATTERN matching a directory" "$MT" train "${TRAIN[@]}" --data "$TMP/dshards/train_*.bin" --vocab-size 256 --run-dir "$TMP/dsh"
grep -q "is a directory, not a token shard file" "$TMP/err" && ok "... a shard that is a directory is named as one" || bad "dir shard: $(cat "$TMP/err")"
mkdir -p "$TMP/hfv"
/usr/bin/python3 - "$TMP/hfv" <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))  # GPT-2 bytes_to_unicode
cs, n = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): i for i, c in enumerate(cs)}
vocab["ab"] = 1000   # ids 256..999 missing
json.dump(vocab, open(sys.argv[1] + "/vocab.json", "w")); open(sys.argv[1] + "/merges.txt", "w").write("#version: 0.2\n")
PY
expect_usage "prepare --tokenizer vocab.json with an id gap (256..999 missing)" "$MT" prepare --input "$TMP/small.txt" --out "$TMP/hfvout" --tokenizer "$TMP/hfv/vocab.json"
grep -q "token ids are not contiguous: id 256 is missing" "$TMP/err" && [ ! -e "$TMP/hfvout/train_000.bin" ] && ok "... refused, naming the first missing id" || bad "id gap: $(cat "$TMP/err")"

echo "== report: the ETTR breakdown partitions the wall time (no negative 'other'); the HTML says what the job ran with"
"$MT" ckpt import --from hf "$TMP/hf" --out "$TMP/imported" --tokenizer "$TMP/data/tokenizer.bin" >/dev/null 2>&1
"$MT" report --run "$TMP/imported" --json >"$TMP/out" 2>"$TMP/err"
/usr/bin/python3 - "$TMP/out" <<'PY' 2>"$TMP/err" && ok "report of an imported run: every ETTR category >= 0, summing to the wall time" || bad "imported run's ETTR: $(cat "$TMP/err")"
import json, sys
d = json.load(open(sys.argv[1])); b = d["ettr_breakdown"]
parts = {k: v for k, v in b.items() if k.endswith("_s") and k != "wall_s" and v is not None}
assert all(v >= -1e-9 for v in parts.values()), parts
if "wall_s" in b: assert abs(sum(parts.values()) - b["wall_s"]) < 1e-6, (parts, b["wall_s"])
PY
"$MT" report --run "$TMP/imported" >"$TMP/out" 2>&1
grep "other (eval" "$TMP/out" | grep -q -- "-[0-9]" && bad "text report shows a negative other: $(grep other "$TMP/out")" || ok "... and the text report shows no negative time"
"$MT" run --run-dir "$TMP/nostart" --max-restarts 1 -- "$MT" train "${TRAIN[@]}" --data "$TMP/no_such_data" --ckpt-every 5 --run-dir "$TMP/nostart" >/dev/null 2>&1
"$MT" report --run "$TMP/nostart" --html "$TMP/nostart.html" >/dev/null 2>&1
grep -q "no checkpoints recorded (no trainer run started" "$TMP/nostart.html" && ! grep -q "ckpt_every = 0" "$TMP/nostart.html" && ! grep -q '<table class="checkpoints">' "$TMP/nostart.html" \
  && ok "HTML of a job whose trainer never started: no 'ckpt_every = 0' default, no empty table" || bad "html never-started: $(grep -o 'no checkpoints[^<]*' "$TMP/nostart.html")"

echo "== a tokenizer must fit the model: serve/sample --tokenizer; sample of a run without one works on ids"
expect_usage "serve --tokenizer (300 tokens) for a 256-row model" "$MT" serve --run "$TMP/run" --port 0 --tokenizer "$TMP/bpe/tokenizer.bin"
grep -q "has 300 tokens but the model's vocabulary has 256 rows" "$TMP/err" && ok "... names both sizes" || bad "serve tokenizer size: $(cat "$TMP/err")"
expect_usage "sample --tokenizer (300 tokens) for a 256-row model" "$MT" sample --run "$TMP/run" --tokenizer "$TMP/bpe/tokenizer.bin" --max-tokens 2
timeout 30 "$MT" sample --run "$TMP/run" --tokenizer "$TMP/data/tokenizer.bin" --prompt ab --max-tokens 3 >"$TMP/out" 2>"$TMP/err" && [ -s "$TMP/out" ] \
  && ok "sample --tokenizer FILE (the model's own)" || bad "sample --tokenizer: $(cat "$TMP/err")"
timeout 30 "$MT" sample --run "$TMP/idrun" --prompt "97 98" --max-tokens 4 >"$TMP/out" 2>"$TMP/err"; rc=$?
[ $rc = 0 ] && grep -Eq '^97 98 \|( [0-9]+){4}$' "$TMP/out" && ok "sample of a run without a tokenizer: ids in, 4 ids out ($(cat "$TMP/out"))" || bad "sample on ids: rc $rc $(cat "$TMP/out" "$TMP/err")"
expect_usage "sample of a run without a tokenizer, --prompt text" "$MT" sample --run "$TMP/idrun" --prompt "hello" --max-tokens 2

echo "== an output directory that is a file: said so, not 'Not a directory' about run.db; --resume N lists the steps there are"
touch "$TMP/plain"
expect_usage "ckpt import --out FILE" "$MT" ckpt import --from hf "$TMP/hf" --out "$TMP/plain"
grep -q "'$TMP/plain' exists and is not a directory" "$TMP/err" && ! grep -q run.db "$TMP/err" && ok "... 'exists and is not a directory'" || bad "import --out FILE: $(cat "$TMP/err")"
expect_usage "prepare --out FILE" "$MT" prepare --input "$TMP/small.txt" --out "$TMP/plain"
grep -q "'$TMP/plain' exists and is not a directory" "$TMP/err" && ok "... the same words" || bad "prepare --out FILE: $(cat "$TMP/err")"
expect_usage "train --resume 7 (steps 2 saved)" "$MT" train "${TRAIN[@]}" --run-dir "$TMP/run" --resume 7 --ckpt-every 2
grep -q "no committed checkpoint of step 7 .*(committed steps: 2)" "$TMP/err" && ok "... lists the committed steps" || bad "resume 7: $(cat "$TMP/err")"

echo "== simulate: one message for --interval 0 and -5; a formula outside its range is not printed as a value"
expect_usage "simulate --interval 0" "$MT" simulate --interval 0; m0=$(cat "$TMP/err")
expect_usage "simulate --interval -5" "$MT" simulate --interval -5
[ "${m0%\'0\'}" = "$(sed "s/'-5'\$//" "$TMP/err")" ] && ok "... the same message for both" || bad "interval messages differ: $m0 | $(cat "$TMP/err")"
"$MT" simulate --gpus 16384 --mtbf-gpu-hours 120 --ckpt-save-s 30 --restart-s 300 --trials 5 >"$TMP/out" 2>&1
grep -q "the formula assumes C << M" "$TMP/out" && grep -q "first-order n/a (losses exceed" "$TMP/out" && ! grep -q "first-order 0.0000" "$TMP/out" \
  && ok "C close to M: Young/Daly flagged as outside its assumption, the clamped first-order model as n/a" || bad "simulate out of range: $(head -4 "$TMP/out")"

echo "== plan: tp larger than a node's GPUs is a rule that cannot hold, not 'all met'"
timeout 30 "$MT" plan --nodes 2 --gpus-per-node 4 --tp 8 --pp 1 --dp 1 >"$TMP/out" 2>&1
grep -q "tp 8 is larger than a scale-up domain (4 GPUs)" "$TMP/out" && ! grep -q "all met" "$TMP/out" && ok "plan --tp 8 on 4-GPU nodes says why the rule breaks" || bad "plan tp > gpus: $(grep -E 'met|broken|TP:' "$TMP/out" | head -3)"

echo "== run --rankfile: a slot past this machine's cores is refused before launch (mpirun exited 1 silently, retried)"
nc=$(nproc)
printf 'localhost slots=%d\n' $((nc + 4)) > "$TMP/hosts_big"
printf '# minitrain plan: tp=1 pp=1 dp=2 ep=1 world=2\nrank 0=localhost slot=0\nrank 1=localhost slot=%d\n' "$nc" > "$TMP/cores.rf"
expect_usage "run --rankfile with slot=$nc on a $nc-core machine" "$MT" run --run-dir "$TMP/coresrun" --max-restarts 3 --hostfile "$TMP/hosts_big" --rankfile "$TMP/cores.rf" -- /bin/true
grep -q "this machine has $nc core" "$TMP/err" && ! grep -q "attempt 1" "$TMP/err" && ok "... names the core count, launches nothing" || bad "rankfile cores: $(cat "$TMP/err")"

echo "== run again on a finished job: says it is accounted as a restart of that job"
"$MT" run --run-dir "$TMP/again" -- "$MT" train "${TRAIN[@]}" --ckpt-every 2 --run-dir "$TMP/again" >"$TMP/out" 2>&1
grep -q "already completed" "$TMP/out" && bad "note on the first run" || ok "no note on the first run of a directory"
"$MT" run --run-dir "$TMP/again" -- "$MT" train "${TRAIN[@]}" --ckpt-every 2 --run-dir "$TMP/again" >"$TMP/out" 2>&1
grep -q "holds a job that already completed; this launch is accounted as a restart" "$TMP/out" && ok "the second says so, naming --run-dir for a new job" || bad "no note: $(tail -3 "$TMP/out")"

echo "== HF export -> import -> export: tensors byte for byte; only minitrain.step (an import is step 0) differs"
"$MT" ckpt export --run "$TMP/imported" --out "$TMP/hf_rt/model.safetensors" >/dev/null 2>&1
/usr/bin/python3 - "$TMP/hf/model.safetensors" "$TMP/hf_rt/model.safetensors" <<'PY' 2>"$TMP/err" && ok "round trip: same tensor bytes, minitrain.step 2 -> 0 as docs/interop.md says" || bad "HF round trip: $(cat "$TMP/err")"
import json, struct, sys
def read(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return h.pop("__metadata__"), {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()}
(ma, ta), (mb, tb) = read(sys.argv[1]), read(sys.argv[2])
assert ta == tb, "tensors differ"
assert ma["minitrain.step"] == "2" and mb["minitrain.step"] == "0", (ma, mb)
PY

echo "== report pictures of a restarted job: only the recomputed steps of the earlier launch are faint; one val-loss marker"
"$MT" run --run-dir "$TMP/rec" --max-restarts 2 --backoff 0:0 -- "$MT" train "${TRAIN[@]}" --steps 8 --ckpt-every 2 --ckpt-async 0 \
  --eval-every 2 --fault kill@step=5 --run-dir "$TMP/rec" >/dev/null 2>&1
"$MT" report --run "$TMP/rec" --svg "$TMP/rec.svg" --html "$TMP/rec.html" >/dev/null 2>&1
/usr/bin/python3 - "$TMP/rec-metrics.svg" "$TMP/rec.svg" "$TMP/rec.html" <<'PY' 2>"$TMP/err" && ok "earlier launch: kept steps solid, recomputed dotted; val loss drawn alike in both pictures; no pp_idle rows or negative times in the event list" || bad "restart pictures: $(cat "$TMP/err")"
import re, sys
m = open(sys.argv[1]).read(); loss = m[m.index('data-panel="loss"'):]; loss = loss[:loss.index("</g>")]
lines = [t for t in re.findall(r"<polyline[^>]*>", loss) if 'stroke="#004488"' in t]
solid = [t for t in lines if "dasharray" not in t]; dotted = [t for t in lines if 'dasharray="2,3"' in t]
assert len(solid) >= 2 and len(dotted) >= 1, (len(solid), len(dotted))   # run 1 kept, run 2; run 1 recomputed
marks = {re.sub(r'c[xy]="[^"]*"', "", c) for f in sys.argv[1:3] for c in re.findall(r'<circle[^>]*r="3.5"[^>]*/>', open(f).read())}
marks = {re.sub(r'\s*stroke-opacity="[^"]*"', "", c) for c in marks}
assert len(marks) == 1, marks
h = open(sys.argv[3]).read(); ev = h[h.index('<table class="events">'):]
times = [float(t) for t in re.findall(r'<tr class="ev-[a-z_]*"><td class="num">(-?[0-9.]+)</td>', ev)]
assert times and min(times) >= 0, times[:5]
PY

echo "== prepare --out: never a run directory, a checkpoint or a tier root"
expect_usage "prepare --out RUN" "$MT" prepare --input "$TMP/small.txt" --out "$TMP/run"
expect_usage "prepare --out RUN/ckpt/step_N" "$MT" prepare --input "$TMP/small.txt" --out "$TMP/run/ckpt/step_00000002"
expect_usage "prepare --out RUN/ckpt/new (a tier root)" "$MT" prepare --input "$TMP/small.txt" --out "$TMP/run/ckpt/new"
"$MT" ckpt verify --run "$TMP/run" >/dev/null 2>&1 && [ ! -e "$TMP/run/ckpt/new" ] && ok "... the run and its checkpoint untouched" || bad "prepare wrote into the run"

echo "run_bad_inputs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
