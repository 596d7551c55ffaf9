#!/usr/bin/env bash
# bench/ab-step.sh - several builds' step-bench on the same models in alternating rounds (one
# device call, same machine: the only comparison docs/perf.md accepts), one line per run with
# the copy bandwidth and each decode batch's ms/step and share of the floor.
#
#   bench/ab-step.sh MODEL[,MODEL...] NAME=STEP_BENCH [NAME=STEP_BENCH...]
#
# A NAME=STEP_BENCH may carry environment first: "warm=env CAPY_CUDA_WARM=1 build/x/step-bench".
# ROUNDS (2) rounds; ARGS (--device cuda --prefill 16 --batch 1,8 --decode 64 --sample greedy)
# go to every step-bench; TIMEOUT (90) seconds a run.
set -uo pipefail
models=${1:?MODEL[,MODEL...]}
shift
[ $# -ge 1 ] || { echo "usage: bench/ab-step.sh MODEL[,MODEL...] NAME=STEP_BENCH..." >&2; exit 2; }
args=${ARGS:---device cuda --prefill 16 --batch 1,8 --decode 64 --sample greedy}
IFS=, read -r -a ms <<<"$models"
for ((r = 1; r <= ${ROUNDS:-2}; r++)); do
	for m in "${ms[@]}"; do
		for b in "$@"; do
			name=${b%%=*} cmd=${b#*=}
			# shellcheck disable=SC2086 # cmd and args are word lists on purpose
			out=$(timeout "${TIMEOUT:-90}" $cmd "$m" $args 2>&1)
			rc=$?
			bw=$(sed -n 's/^copy bandwidth \([0-9]*\) GB\/s.*/\1 GB\/s/p' <<<"$out")
			dec=$(sed -n 's/^decode batch *\([0-9]*\)[^:]*: \([0-9.]*\) ms\/step.*(\([0-9]*\) % of the floor).*/b\1 \2 ms (\3 %)/p; s/^decode batch *\([0-9]*\)[^:]*: \([0-9.]*\) ms\/step.*/b\1 \2 ms/p' <<<"$out" |
				awk '!seen[$1]++' | paste -sd' ')
			printf 'round %d  %-28s %-10s %s  %s%s\n' "$r" "$(basename "$m")" "$name" "${bw:-?}" "${dec:-no decode line}" \
				"$([ $rc = 0 ] || echo "  (exit $rc)")"
		done
	done
done
