# tests/timing_lib.sh — time limits for the run_*.sh scripts that hold on a loaded machine
# (sourced, not run). CI runs `make test` on a quiet runner and on one shared with other jobs; a
# limit tuned on the quiet one (a 3 s --heartbeat-timeout, "gone within 1 s") fails on the loaded
# one without any bug. So a limit either waits for its condition with a generous deadline (which
# costs nothing when the condition comes true at once), or is derived from what this machine just
# measured (a timeout that must be short because the test waits it out, like a hang's detection):
#   MT_TIME_SCALE            multiplies every limit below (default 1; a slow runner may raise it)
#   mt_scaled FLOOR K S      max(FLOOR, K x S) x MT_TIME_SCALE, in whole seconds (rounded up)
#   mt_timed VAR CMD...      run CMD; VAR = its wall time in seconds; returns CMD's status
#   mt_wait_for S CMD...     poll CMD every 0.1 s until it succeeds (return 0) or S x
#                            MT_TIME_SCALE seconds pass (return 1)

mt_scaled() {
  awk -v f="$1" -v k="$2" -v s="$3" -v m="${MT_TIME_SCALE:-1}" \
    'BEGIN { x = k * s; if (x < f) x = f; x *= m; r = int(x); if (r < x) r++; print r }'
}

mt_timed() {
  local __var=$1 __t0 __rc=0; shift
  __t0=$(date +%s.%N)
  "$@" || __rc=$?
  printf -v "$__var" '%s' "$(awk -v a="$__t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')"
  return $__rc
}

mt_wait_for() {
  local deadline
  deadline=$(awk -v s="$1" -v m="${MT_TIME_SCALE:-1}" -v t="$(date +%s.%N)" 'BEGIN { printf "%.2f", t + s * m }')
  shift
  while :; do
    "$@" && return 0
    awk -v d="$deadline" -v t="$(date +%s.%N)" 'BEGIN { exit !(t >= d) }' && return 1
    sleep 0.1
  done
}
