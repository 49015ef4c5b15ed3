# Sourced by build.sh: one line per component into $TF_CLUSTER_TIMINGS (tooling/timings.py's
# format), when it is set, with its CPU seconds: what this shell's waited-for children used
# (/proc/$$/stat's cutime and cstime, in clock ticks) from `stamp` to `timing`. build.sh builds its
# components one after another, so each line's CPU is that component's build.
#   t0=$(stamp); ...; timing NAME "$t0"
TICKS=$(getconf CLK_TCK 2>/dev/null || echo 100)
children_ticks() { local s; s=$(< "/proc/$$/stat"); s=${s##*) }; set -- $s; echo $(( ${14} + ${15} )); }
stamp() { echo "$(date +%s%N):$(children_ticks)"; }
timing() {  # timing NAME START (stamp)
  [ -n "${TF_CLUSTER_TIMINGS:-}" ] || return 0
  local ns=${2%%:*} ticks=${2#*:} ms cpu
  ms=$(( ($(date +%s%N) - ns) / 1000000 ))
  cpu=$(( ($(children_ticks) - ticks) * 10 / TICKS ))  # tenths of a second
  printf '%s\t%d.%d\t%d\t0\t%d.%d\n' "${TF_CLUSTER_TIMING_PHASE:+$TF_CLUSTER_TIMING_PHASE/}$1" \
    $((ms / 1000)) $(((ms % 1000) / 100)) $((ns / 1000000000)) $((cpu / 10)) $((cpu % 10)) >> "$TF_CLUSTER_TIMINGS"
}
