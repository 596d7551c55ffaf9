#!/bin/bash
# tools.sh - the tools on the GPU against transformers and against the CPU, on every fixture
# (run by make test-cuda after the C tests; needs python3 and a built tree):
#   capy-gen --device cuda: greedy ids equal to transformers' (t/fixtures/*/ref.json) for 32
#     tokens (16 with NVFP4 experts) and to capy-gen --device cpu;
#   capy-ppl --device cuda: perplexity within 1e-3 of transformers (5e-3 for the trained W4A4
#     model, the CPU's own bound) and within 1e-3 of the CPU's;
#   capy-gen --grammar / --json-schema --device cuda: greedy ids equal to --device cpu's;
#   capy-serve --device cuda: a greedy chat completion equal to the CPU server's, and with
#     --spec mtp;
#   capy-gen --device cuda --spec ngram, 1 to 4 drafts: greedy ids equal to --spec off on the
#     GPU and to the CPU's, with drafts accepted, on every model;
#   capy-serve --device cuda --profile agent: MTP and n-gram drafts (--spec auto keeps the head
#     on the GPU), the answers of the CPU server, four requests at once as alone, drafts
#     accepted, windows drafted by the head;
#   capy-gen --device cuda --spec mtp: greedy ids equal to --spec off with 1 to 4 drafts, with
#     and without a draft vocabulary, on every model with an MTP head.
set -u
cd "$(dirname "$0")/../.."
B=${CAPY_BUILD:-build}
FIX=t/fixtures
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
pass=0 fail=0
declare -A got ans
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
# the checkpoint directory of a fixture or of capy-tiny (share/models, the trained model)
dir() { case $1 in capy-tiny*) echo "share/models/$1" ;; *) echo "$FIX/$1" ;; esac; }
ref() { python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$(dir "$1")/ref.json" "$2"; }

for m in qwen3_5-dense qwen3_5_moe qwen3_5_moe-nvfp4 qwen3_next qwen4_exp capy-tiny capy-tiny-nvfp4; do
	$B/bin/capy-convert -q -m "$(dir "$m")" -o "$T/$m.capy" || { bad "$m: convert"; continue; }
	n=32; [[ $m == *nvfp4 ]] && n=16
	prompt=$(ref "$m" '" ".join(map(str, r["greedy"]["prompt"]))')
	want=$(ref "$m" '" ".join(map(str, r["greedy"]["ids_cache"][:'$n']))')
	for d in cuda cpu; do
		got[$d]=$($B/bin/capy-gen -q "$T/$m.capy" --device $d --prompt-ids "$prompt" -n $n --temp 0 --ids --ignore-eos)
	done
	[ "${got[cuda]}" = "$want" ] && ok "$m: capy-gen --device cuda greedy = transformers ($n tokens)" ||
		bad "$m: capy-gen --device cuda greedy: got '${got[cuda]}' want '$want'"
	[ "${got[cuda]}" = "${got[cpu]}" ] && ok "$m: capy-gen greedy cuda = cpu" || bad "$m: cuda '${got[cuda]}' cpu '${got[cpu]}'"
	ref "$m" '" ".join(map(str, r["ids"]))' >"$T/$m.ids"
	for d in cuda cpu; do
		$B/bin/capy-ppl -q "$T/$m.capy" "$T/$m.ids" --ids --json --ctx 4096 --kv f32 --device $d >"$T/$m.$d.json"
	done
	# Against transformers, the trained W4A4 model gets the CPU's own bound (t3020: the
	# exact integer W4A4 and transformers' float emulation differ by 2e-3 there); every
	# model stays within 1e-3 of the CPU.
	case $m in *capy-tiny-nvfp4) tb=5e-3 ;; *) tb=1e-3 ;; esac
	if python3 - "$T/$m.cuda.json" "$T/$m.cpu.json" "$(dir "$m")/ref.json" "$tb" <<'PY'
import json, sys
g, c, r = (json.load(open(p)) for p in sys.argv[1:4])
a, b = abs(g["ppl"] - r["ppl"]) / r["ppl"], abs(g["ppl"] - c["ppl"]) / c["ppl"]
print("   ppl cuda %.6g cpu %.6g transformers %.6g: rel %.2g / %.2g" % (g["ppl"], c["ppl"], r["ppl"], a, b))
sys.exit(0 if a < float(sys.argv[4]) and b < 1e-3 else 1)
PY
	then ok "$m: capy-ppl --device cuda within $tb of transformers and 1e-3 of cpu"; else bad "$m: capy-ppl"; fi
done

# capy-gen --grammar on the GPU: the grammar's mask uploaded and applied by the device's
# greedy sampler, the same ids as the CPU's masked sampler: all 48 on capy-tiny (trained, wide
# margins), the first 8 on the random fixtures. Their GPU logits are within ~1e-5 of the CPU's,
# not equal, and with noise for preferences the argmax over the few ids a grammar allows can
# flip on a near tie further on (seen: arithmetic.gbnf on qwen3_5_moe at the 11th id). The
# masked sampling itself is checked bit for bit on the same logits by u-cuda-sample and
# u-cuda-model.
for m in qwen3_5_moe qwen3_5-dense capy-tiny; do
	[ -f "$T/$m.capy" ] || continue
	n=8
	[ $m = capy-tiny ] && n=48
	for g in json.gbnf arithmetic.gbnf list.gbnf; do
		for d in cuda cpu; do
			got[$d]=$($B/bin/capy-gen -q "$T/$m.capy" --device $d -p "Write it:" --grammar "$FIX/grammars/$g" -n 48 --temp 0 --ids |
				tr -s ' \n' '\n\n' | head -n $n | tr '\n' ' ')
		done
		[ -n "${got[cuda]}" ] && [ "${got[cuda]}" = "${got[cpu]}" ] && ok "$m: capy-gen --grammar $g greedy cuda = cpu ($n ids)" ||
			bad "$m: --grammar $g: cuda '${got[cuda]}' cpu '${got[cpu]}'"
	done
done
printf '%s' '{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"}},"required":["name","n"]}' >"$T/schema.json"
for d in cuda cpu; do
	got[$d]=$($B/bin/capy-gen -q "$T/qwen3_5_moe.capy" --device $d -p "x" --json-schema "$T/schema.json" -n 64 --temp 0)
done
[ -n "${got[cuda]}" ] && [ "${got[cuda]}" = "${got[cpu]}" ] && ok "qwen3_5_moe: capy-gen --json-schema greedy cuda = cpu" ||
	bad "qwen3_5_moe: --json-schema: cuda '${got[cuda]}' cpu '${got[cpu]}'"

# capy-serve on the GPU: greedy chat completions, the same text as the CPU server's: the random
# fixture, and capy-tiny's tool call (it must be the calculator call with its expression).
tools=$(python3 -c 'import json, sys; sys.path.insert(0, "share/models"); import corpus_tiny; print(json.dumps(corpus_tiny.TOOLS))')
for m in qwen3_5_moe capy-tiny; do
if [ $m = capy-tiny ]; then
	body='{"model":"m","messages":[{"role":"user","content":"What is 128 * 46?"}],"max_tokens":96,"temperature":0,"tools":'$tools'}'
else
	body='{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":24,"temperature":0}'
fi
for d in cuda cpu cuda-mtp; do
	port=$((18000 + RANDOM % 2000))
	$B/bin/capy-serve "$T/$m.capy" --device ${d%-mtp} --port $port --model-id m --max-concurrency 4 --threads 4 \
		$([ $d = cuda-mtp ] && echo --spec mtp) 2>"$T/serve.$d.log" &
	pid=$!
	ans[$d]=$(python3 - "$port" "$body" <<'PY' 2>&1
import json, sys, time, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
for _ in range(150):
    try:
        urllib.request.urlopen(base + "/health", timeout=2)
        break
    except Exception:
        time.sleep(0.2)
req = urllib.request.Request(base + "/v1/chat/completions", sys.argv[2].encode(), {"content-type": "application/json"})
m = json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]
calls = [c["function"] for c in m.get("tool_calls") or []]  # without the ids, which differ per request
print(json.dumps([m.get("reasoning_content"), m["content"], calls]))
PY
)
	kill $pid; wait $pid 2>/dev/null
done
printf '%s' "${ans[cpu]}" >"$T/answer.cpu.$m"
[ -n "${ans[cuda]}" ] && [ "${ans[cuda]}" = "${ans[cpu]}" ] && ok "$m: capy-serve --device cuda answers as the CPU server (${#ans[cuda]} chars)" ||
	{ bad "$m: capy-serve: cuda '${ans[cuda]}' cpu '${ans[cpu]}'"; tail -5 "$T/serve.cuda.log"; }
[ -n "${ans[cuda-mtp]}" ] && [ "${ans[cuda-mtp]}" = "${ans[cuda]}" ] && ok "$m: capy-serve --device cuda --spec mtp answers as without" ||
	{ bad "$m: capy-serve --spec mtp: '${ans[cuda-mtp]}' without '${ans[cuda]}'"; tail -5 "$T/serve.cuda-mtp.log"; }
if [ $m = capy-tiny ]; then
	[[ ${ans[cuda]} == *'"arguments": "{\"expression\": \"128 * 46\"}"'* ]] && ok "capy-tiny: the calculator call on the GPU" ||
		bad "capy-tiny: no calculator call on the GPU: ${ans[cuda]}"
fi
done

# Speculative decoding on the GPU: n-gram drafts verified in windows that keep each token's
# state and are cut back to the accepted drafts (docs/spec.md). Greedy ids with --spec ngram and
# 1 to 4 drafts must be those of --spec off on the GPU, bit for bit, and the CPU's, for 40
# tokens. Random weights accept drafts only where their output repeats their prompt: the
# prompts are P G P and P G P G P, G the model's own continuation of P (on the CPU), on which
# every fixture accepts some for every draft count (measured on the CPU; the counts depend on
# the ids alone, so they are the same on the GPU when its ids are); capy-tiny (trained) is asked
# to repeat a text that repeats itself. Windows must have run and drafts been accepted.
P="5 6 7 8 9 5 6 7 8 9 5 6 7 8"
for m in qwen3_5-dense qwen3_5_moe qwen3_5_moe-nvfp4 qwen3_next qwen4_exp capy-tiny capy-tiny-nvfp4; do
	[ -f "$T/$m.capy" ] || continue
	if [[ $m == capy-tiny* ]]; then
		prompts=("$(printf 'Repeat this exactly: def add(a, b): return a + b. def sub(a, b): return a - b. def mul(a, b): return a * b.' |
			$B/bin/capy-gen --tokenize "$T/$m.capy")")
	else
		G=$($B/bin/capy-gen -q "$T/$m.capy" --device cpu --prompt-ids "$P" -n 32 --temp 0 --ids --ignore-eos)
		prompts=("$P $G $P" "$P $G $P $G $P")
	fi
	declare -A win=() acc=() diff=()
	for p in "${prompts[@]}"; do
		for d in cuda cpu; do
			got[$d]=$($B/bin/capy-gen -q "$T/$m.capy" --device $d --prompt-ids "$p" -n 40 --temp 0 --ids --ignore-eos)
		done
		[ -n "${got[cuda]}" ] && [ "${got[cuda]}" = "${got[cpu]}" ] ||
			bad "$m: --spec off: cuda '${got[cuda]}' cpu '${got[cpu]}' (prompt $p)"
		for k in 1 2 3 4; do
			spec=$($B/bin/capy-gen "$T/$m.capy" --device cuda --prompt-ids "$p" -n 40 --temp 0 --ids --ignore-eos \
				--spec ngram --draft-tokens $k --ngram-min 1 2>"$T/spec.err")
			if [ "$spec" != "${got[cuda]}" ]; then
				diff[$k]=1
				echo "   $m k=$k: --spec ngram '$spec' --spec off '${got[cuda]}' (prompt $p)"
				tail -2 "$T/spec.err"
			fi
			w=$(grep -o '[0-9]* windows of up to' "$T/spec.err" | head -1 | cut -d' ' -f1)
			a=$(grep -o '[0-9]* accepted' "$T/spec.err" | head -1 | cut -d' ' -f1)
			win[$k]=$((${win[$k]:-0} + ${w:-0}))
			acc[$k]=$((${acc[$k]:-0} + ${a:-0}))
		done
	done
	for k in 1 2 3 4; do
		[ -z "${diff[$k]:-}" ] && [ "${acc[$k]}" -gt 0 ] &&
			ok "$m: capy-gen --device cuda --spec ngram --draft-tokens $k = --spec off = cpu (${win[$k]} windows, ${acc[$k]} drafts accepted)" ||
			bad "$m: --spec ngram --draft-tokens $k: ids ${diff[$k]:+not }equal to --spec off, ${win[$k]} windows, ${acc[$k]} accepted"
	done
done

# capy-serve on the GPU with the agent profile: --spec auto is mtp+ngram on a model with an MTP
# head (both of these have one), and the GPU runs the head (every routed expert resident here),
# so nothing is dropped: MTP and n-gram drafts, no "MTP drafts off" line; the first answer is
# the CPU server's above; each of four requests gives the same answer alone and all four at
# once (windows beside other requests' rows); the server counts accepted drafts and windows the
# head drafted.
for m in qwen3_5_moe capy-tiny; do
if [ $m = capy-tiny ]; then
	body='{"model":"m","messages":[{"role":"user","content":"What is 128 * 46?"}],"max_tokens":96,"temperature":0,"tools":'$tools'}'
else
	body='{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":24,"temperature":0}'
fi
port=$((18000 + RANDOM % 2000))
$B/bin/capy-serve "$T/$m.capy" --device cuda --port $port --model-id m --profile agent --max-context 8192 --threads 4 \
	--ngram-min 1 2>"$T/serve.spec.log" &
pid=$!
out=$(python3 - "$port" "$body" <<'PY' 2>&1
import concurrent.futures, json, re, sys, time, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
for _ in range(150):
    try:
        urllib.request.urlopen(base + "/health", timeout=2)
        break
    except Exception:
        time.sleep(0.2)
def ask(body):
    req = urllib.request.Request(base + "/v1/chat/completions", body.encode(), {"content-type": "application/json"})
    m = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]
    calls = [c["function"] for c in m.get("tool_calls") or []]
    return json.dumps([m.get("reasoning_content"), m["content"], calls])
bodies = [sys.argv[2]] + [json.dumps({"model": "m", "messages": [{"role": "user", "content": c}], "max_tokens": 64,
                                      "temperature": 0})
                          for c in ("Write a Python function that returns the square of a number.",
                                    "Hello! Who are you?", "Explain the for statement in Python.")]
alone = [ask(b) for b in bodies]
with concurrent.futures.ThreadPoolExecutor(len(bodies)) as ex:
    together = list(ex.map(ask, bodies))
met = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
num = lambda name: int(float(re.search(r"^%s (\S+)$" % name, met, re.M).group(1)))
print(alone[0])
print("together %s; windows %d accepted %d mtp %d" % ("same" if together == alone else "DIFFERENT %s" % together,
      num("capy_spec_windows_total"), num("capy_spec_accepted_tokens_total"),
      num(re.escape('capy_spec_source_windows_total{source="mtp"}'))))
PY
)
kill $pid; wait $pid 2>/dev/null
first=$(head -1 <<<"$out") rest=$(tail -1 <<<"$out")
w=$(sed -n 's/.*; windows \([0-9]*\) accepted.*/\1/p' <<<"$rest")
a=$(sed -n 's/.* accepted \([0-9]*\) mtp.*/\1/p' <<<"$rest")
mw=$(sed -n 's/.* mtp \([0-9]*\)$/\1/p' <<<"$rest")
[ $m = capy-tiny ] && need=$a || need=$w # random weights: windows run (and are cut back); capy-tiny accepts
grep -q "^capy-serve: speculative decoding: MTP and n-gram drafts" "$T/serve.spec.log" && ! grep -q "drafts off" "$T/serve.spec.log" &&
	ok "$m: capy-serve --device cuda --profile agent keeps the MTP head: MTP and n-gram drafts" ||
	{ bad "$m: the agent profile on the GPU does not draft with the head and n-grams"; head -8 "$T/serve.spec.log"; }
[ "${mw:-0}" -gt 0 ] && ok "$m: the head drafted $mw windows on the GPU" || bad "$m: no window drafted by the MTP head ($rest)"
if [ "$first" = "$(cat "$T/answer.cpu.$m" 2>/dev/null)" ]; then
	ok "$m: capy-serve --device cuda with MTP and n-gram drafts answers as the CPU server (${#first} chars)"
else
	bad "$m: capy-serve --device cuda with drafts: '$first' cpu '$(cat "$T/answer.cpu.$m" 2>/dev/null)'"
fi
[[ $rest == "together same; "* ]] && [ "${need:-0}" -gt 0 ] &&
	ok "$m: four requests at once as alone with drafts on the GPU ($rest)" || { bad "$m: capy-serve --spec on the GPU: $rest"; tail -5 "$T/serve.spec.log"; }
done

# capy-gen --spec mtp on the GPU: the head's drafts verified by the target, so greedy ids equal
# to --spec off (48 tokens), 1 to 4 drafts, with and without a draft vocabulary (every other id
# of the lower half, in capy-shortlist's format), on every model with an MTP head: the random
# fixtures (nothing accepted: every window cut back) and capy-tiny (its trained head: drafts
# accepted, on a prompt that repeats). The statistics line says the head drafted the windows.
# The windows are verified and cut back with the backend's kept states, as the n-gram ones above.
printf 'Repeat this exactly: def add(a, b): return a + b. def sub(a, b): return a - b. def mul(a, b): return a * b.' |
	$B/bin/capy-gen --tokenize "$T/capy-tiny.capy" >"$T/repeat.ids"
for m in qwen3_5-dense qwen3_5_moe qwen3_5_moe-nvfp4 qwen3_next qwen4_exp capy-tiny capy-tiny-nvfp4; do
	[ -f "$T/$m.capy" ] || continue
	prompt="5 6 7 8 9 5 6 7 8 9 5 6 7 8"
	[[ $m == capy-tiny* ]] && prompt=$(cat "$T/repeat.ids")
	V=$(python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c.get("vocab_size") or c["text_config"]["vocab_size"])' "$(dir "$m")/config.json")
	{ echo "# every other id of the lower half"; seq 0 2 $((V / 2))
	} >"$T/$m.short"
	want=$($B/bin/capy-gen -q "$T/$m.capy" --device cuda --prompt-ids "$prompt" -n 48 --temp 0 --ids --ignore-eos)
	for k in 1 2 3 4; do
		for short in "" "--draft-shortlist $T/$m.short"; do
			got=$($B/bin/capy-gen "$T/$m.capy" --device cuda --prompt-ids "$prompt" -n 48 --temp 0 --ids --ignore-eos \
				--spec mtp --draft-tokens $k $short 2>"$T/spec.err")
			stats=$(grep -o '[0-9]* windows of up to [0-9]* drafts, [0-9]* drafted, [0-9]* accepted' "$T/spec.err")
			mtp_w=$(sed -n 's/.*: \([0-9]*\) windows drafted by MTP.*/\1/p' "$T/spec.err")
			what="$m: capy-gen --device cuda --spec mtp --draft-tokens $k${short:+ --draft-shortlist}"
			acc=$(sed -n 's/.* drafted, \([0-9]*\) accepted.*/\1/p' <<<"$stats")
			# capy-tiny's head is trained: its drafts are accepted on this prompt
			if [ -n "$want" ] && [ "$got" = "$want" ] && [ "${mtp_w:-0}" -gt 0 ] &&
				{ [ $m != capy-tiny ] || [ "${acc:-0}" -gt 0 ]; }; then
				ok "$what: greedy = --spec off ($stats)"
			else
				bad "$what: got '$got' want '$want' ($stats): $(head -c 300 "$T/spec.err")"
			fi
		done
	done
done

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
