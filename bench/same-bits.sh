#!/usr/bin/env bash
# bench/same-bits.sh - whether two builds give the same bits on a device: step-bench --digest
# (the last logits of each prefill, in chunks, and every decode step's logits at batch 1 and 8)
# on each model, the old build's step-bench against the new one's. For kernel changes that
# must not change a single bit (docs/cuda.md); prints one line per model, exit 1 on a difference.
#
#   bench/same-bits.sh OLD_STEP_BENCH NEW_STEP_BENCH MODEL.capy...
#
# DEVICE (cuda), PREFILL (64,700), STEP (256), BATCH (1,8), DECODE (24) set what runs.
set -uo pipefail
old=${1:?old step-bench}
new=${2:?new step-bench}
shift 2
rc=0
args=(--device "${DEVICE:-cuda}" --prefill "${PREFILL:-64,700}" --step-tokens "${STEP:-256}" --batch "${BATCH:-1,8}"
	--decode "${DECODE:-24}" --digest)
for m in "$@"; do
	a=$("$old" "$m" "${args[@]}" 2>&1 | grep '^digest') || { echo "FAIL $m: the old build: no digest"; rc=1; continue; }
	b=$("$new" "$m" "${args[@]}" 2>&1 | grep '^digest') || { echo "FAIL $m: the new build: no digest"; rc=1; continue; }
	if [ "$a" = "$b" ]; then
		echo "same $m ($(echo "$a" | wc -l) digests)"
	else
		echo "DIFFERENT $m"; diff <(echo "$a") <(echo "$b") | sed 's/^/    /'; rc=1
	fi
done
exit $rc
