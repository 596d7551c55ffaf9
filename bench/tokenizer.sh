#!/usr/bin/env bash
# tokenizer.sh - encode throughput of capy's tokenizer and of Hugging Face tokenizers on one core.
#
#   make bench && (cd t/ext && npm ci) && bench/tokenizer.sh [SECONDS]
#
# The text is this checkout's own sources and documents (C, shell, JavaScript, Markdown: English
# comments and prose mixed with code), concatenated in `git ls-files` order from HEAD, so a
# commit id names it exactly. Both tokenizers get the same bytes and the Qwen3 tokenizer, and
# run pinned to CPU 0. Results go in docs/perf.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

git ls-files -z -- '*.c' '*.h' '*.md' '*.bats' '*.js' '*.sh' Makefile \
	':!libcore/text/tok-unicode.c' ':!t/text/*' ':!t/ext/package-lock.json' |
	xargs -0 cat >"$tmp/text"
zstd -dqf t/text/qwen3/tokenizer.json.zst -o "$tmp/tokenizer.json"

echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (modified)'), text $(wc -c <"$tmp/text") bytes, $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "== capy (build/bench/tokenizer-bench, taskset -c 0)"
taskset -c 0 build/bench/tokenizer-bench "$tmp/tokenizer.json" "$tmp/text" "$seconds"
echo "== Hugging Face tokenizers 0.22.2 (@anush008/tokenizers 0.6.0, taskset -c 0)"
taskset -c 0 node bench/tokenizer-hf.js "$tmp/tokenizer.json" "$tmp/text" "$seconds"
