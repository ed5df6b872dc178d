# Shared by the LoRA-step benchmarks that compare loom with diffusers + peft
# (scripts/bench_flux.sh, scripts/bench_wan.sh): collecting each side's timed steps, medians,
# and the summary lines docs/BENCHMARKS.md records.
#   source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

loom_times=(); ref_times=(); loom_phases=(); ref_phases=()
# Each side prints "step_seconds S" and "phase_seconds forward F backward B optimizer O" per step.
collect() {  # collect TIMES_ARRAY PHASES_ARRAY COMMAND...
  local -n times=$1 phases=$2; shift 2
  while read -r what a b c d e f; do
    if [ "$what" = step_seconds ]; then times+=("$a")
    elif [ "$what" = phase_seconds ]; then phases+=("$b $d $f"); fi
  done < <("$@")
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# phase_medians "F B O"...: the median of each phase, "F B O".
phase_medians() {
  local f=() b=() o=()
  for p in "$@"; do read -r x y z <<<"$p"; f+=("$x"); b+=("$y"); o+=("$z"); done
  printf 'forward %.4f s, backward %.4f s, optimizer %.4f s' "$(median "${f[@]}")" \
    "$(median "${b[@]}")" "$(median "${o[@]}")"
}
# print_comparison: the medians of both sides, their phases and the it/s ratio.
print_comparison() {
  local lm pm
  lm=$(median "${loom_times[@]}"); pm=$(median "${ref_times[@]}")
  echo "  loom           median $(printf '%.4f' "$lm") s ($(awk -v a="$lm" 'BEGIN{printf "%.2f", 1/a}') it/s)"
  echo "  diffusers+peft median $(printf '%.4f' "$pm") s ($(awk -v a="$pm" 'BEGIN{printf "%.2f", 1/a}') it/s)"
  echo "  phases, medians: loom $(phase_medians "${loom_phases[@]}")"
  echo "                   diffusers+peft $(phase_medians "${ref_phases[@]}")"
  echo "  it/s ratio (loom / diffusers+peft): $(awk -v a="$pm" -v b="$lm" 'BEGIN{printf "%.3f", a/b}')"
}
