#!/usr/bin/env bash
# t/fuzz/run.sh - run libFuzzer targets for SECONDS each (default 60) from their seeds.
#   make fuzz && t/fuzz/run.sh 300 [target ...]
# Seeds are committed in t/fuzz/corpus/<name>/ (and a dictionary in t/fuzz/<name>.dict
# when there is one); the corpus a run grows goes to build/fuzz/corpus/<name>/ and
# findings to build/fuzz/findings/<name>/. Prints, per target, the number of runs, the
# peak RSS and any crash summary.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	for f in build/fuzz/t/fuzz/fuzz-*; do
		[ -x "$f" ] && targets+=("${f##*/fuzz-}")
	done
fi
for name in "${targets[@]}"; do
	f=build/fuzz/t/fuzz/fuzz-$name
	mkdir -p "build/fuzz/corpus/$name" "build/fuzz/findings/$name"
	args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
	      -artifact_prefix="build/fuzz/findings/$name/")
	[ -f "t/fuzz/$name.dict" ] && args+=(-dict="t/fuzz/$name.dict")
	dirs=("build/fuzz/corpus/$name")
	[ -d "t/fuzz/corpus/$name" ] && dirs+=("t/fuzz/corpus/$name")
	echo "== $name (${secs}s)"
	"$f" "${args[@]}" "${dirs[@]}" 2>&1 |
		grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY)' || true
done
