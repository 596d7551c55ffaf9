# capy - build, test and check. `make help` lists the targets.
#
# Quiet by default; V=1 shows the commands. Objects and programs go under $(O)
# (build/ by default). CUDA parts are built when nvcc is found; CUDA=0 skips them.
# Local overrides go in config.mak (git-ignored).

-include config.mak

O ?= build
V ?= 0
SAN ?= 0
CUDA ?= auto
PREFIX ?= /usr/local

CC ?= cc
OPT ?= -O2
CFLAGS ?= $(OPT) -g
WARNINGS = -Wall -Wextra -Wshadow -Wvla -Wno-unused-parameter -Werror=implicit-function-declaration
BASE_CFLAGS = -std=c17 -pthread -march=x86-64-v2 -fno-strict-aliasing $(WARNINGS) -MMD -MP
CPPFLAGS += -Ilibcore
LDLIBS = -Wl,--as-needed -lcjson -lzstd -lpcre2-8 -lutf8proc -lmicrohttpd -lnettle -lm -lpthread

ifeq ($(SAN),1)
  BASE_CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
endif

ifneq ($(V),1)
  QUIET_CC = @echo '   ' CC $@;
  QUIET_AR = @echo '   ' AR $@;
  QUIET_LINK = @echo '   ' LINK $@;
  QUIET_NVCC = @echo '   ' NVCC $@;
  QUIET = @
endif

# --- CUDA ---------------------------------------------------------------------
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_SRCS = $(wildcard kernels/*.cu)
ifeq ($(CUDA),auto)
  CUDA := $(if $(and $(NVCC),$(CUDA_SRCS)),1,0)
endif
# sm_90: Hopper (H100/H200, tested); sm_120a: RTX 50 (compiled, not run here).
NVCC_ARCHS ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_120a,code=sm_120a
NVCCFLAGS ?= -O3 -std=c++17 $(NVCC_ARCHS) -Xcompiler -Wall,-Wextra,-fPIC
# TRACE=1: kernels that record the kernel trace (CAPY_CUDA_TRACE, docs/cuda.md); a
# measurement build of its own, since the check costs every kernel a little.
ifeq ($(TRACE),1)
  NVCCFLAGS += -DCK_TRACE
endif
ifeq ($(CUDA),1)
  CPPFLAGS += -DCAPY_HAVE_CUDA=1 -I$(CUDA_HOME)/include
  # -lstdc++: nvcc's host stubs are C++ (static-init guards, EH personality) and cc links
  LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart_static -lstdc++ -ldl -lrt
  KERNEL_OBJS = $(patsubst %.cu,$(O)/%.o,$(CUDA_SRCS))
endif

# --- the library ----------------------------------------------------------------
LIBCORE_OBJS += libcore/artifact/dtype.o
LIBCORE_OBJS += libcore/artifact/read.o
LIBCORE_OBJS += libcore/artifact/write.o
LIBCORE_OBJS += libcore/backend/cpu/attention.o
LIBCORE_OBJS += libcore/backend/cpu/backend.o
LIBCORE_OBJS += libcore/backend/cpu/forward.o
LIBCORE_OBJS += libcore/backend/cpu/gdn.o
LIBCORE_OBJS += libcore/backend/cpu/hc.o
LIBCORE_OBJS += libcore/backend/cpu/moe.o
LIBCORE_OBJS += libcore/backend/cpu/mtp.o
LIBCORE_OBJS += libcore/backend/cpu/ops.o
LIBCORE_OBJS += libcore/backend/cpu/ple.o
LIBCORE_OBJS += libcore/backend/cpu/state.o
LIBCORE_OBJS += libcore/backend/cpu/tp.o
LIBCORE_OBJS += libcore/ckpt/checkpoint.o
LIBCORE_OBJS += libcore/ckpt/safetensors.o
LIBCORE_OBJS += libcore/convert/convert.o
LIBCORE_OBJS += libcore/convert/families.o
LIBCORE_OBJS += libcore/convert/plan.o
LIBCORE_OBJS += libcore/convert/synthetic.o
LIBCORE_OBJS += libcore/constrain/grammar.o
LIBCORE_OBJS += libcore/constrain/json-schema-gbnf.o
LIBCORE_OBJS += libcore/constrain/json-schema-merge.o
LIBCORE_OBJS += libcore/constrain/json-schema-num.o
LIBCORE_OBJS += libcore/constrain/json-schema-regex.o
LIBCORE_OBJS += libcore/constrain/json-schema.o
LIBCORE_OBJS += libcore/constrain/mask-ahead.o
LIBCORE_OBJS += libcore/constrain/mask.o
LIBCORE_OBJS += libcore/cpu/expert.o
LIBCORE_OBJS += libcore/cpu/isa.o
LIBCORE_OBJS += libcore/cpu/linear.o
LIBCORE_OBJS += libcore/cpu/nvfp4-avx2.o
LIBCORE_OBJS += libcore/cpu/nvfp4-avx512.o
LIBCORE_OBJS += libcore/cpu/nvfp4-scalar.o
LIBCORE_OBJS += libcore/cpu/plain-avx2.o
LIBCORE_OBJS += libcore/cpu/plain-avx512.o
LIBCORE_OBJS += libcore/cpu/plain-scalar.o
LIBCORE_OBJS += libcore/engine/engine.o
LIBCORE_OBJS += libcore/engine/seq.o
LIBCORE_OBJS += libcore/gate/golden.o
LIBCORE_OBJS += libcore/gate/greedy.o
LIBCORE_OBJS += libcore/gate/http-client.o
LIBCORE_OBJS += libcore/gate/identity.o
LIBCORE_OBJS += libcore/gate/perplexity.o
LIBCORE_OBJS += libcore/gate/prompts.o
LIBCORE_OBJS += libcore/gate/ref.o
LIBCORE_OBJS += libcore/gate/server.o
LIBCORE_OBJS += libcore/gate/timing.o
LIBCORE_OBJS += libcore/kvstore/entry.o
LIBCORE_OBJS += libcore/kvstore/tiers.o
LIBCORE_OBJS += libcore/model/assets.o
LIBCORE_OBJS += libcore/model/config.o
LIBCORE_OBJS += libcore/model/weights.o
LIBCORE_OBJS += libcore/offload/cpu-experts.o
LIBCORE_OBJS += libcore/offload/cpu-topology.o
LIBCORE_OBJS += libcore/offload/expert-cache.o
LIBCORE_OBJS += libcore/offload/plan.o
LIBCORE_OBJS += libcore/ppl/ppl.o
LIBCORE_OBJS += libcore/quant/floats.o
LIBCORE_OBJS += libcore/quant/nvfp4.o
LIBCORE_OBJS += libcore/sample/sample.o
LIBCORE_OBJS += libcore/sched/prefix.o
LIBCORE_OBJS += libcore/sched/sched.o
LIBCORE_OBJS += libcore/serve/api-chat.o
LIBCORE_OBJS += libcore/serve/api-error.o
LIBCORE_OBJS += libcore/serve/api-messages.o
LIBCORE_OBJS += libcore/serve/api-models.o
LIBCORE_OBJS += libcore/serve/api-parse.o
LIBCORE_OBJS += libcore/serve/api-prompt.o
LIBCORE_OBJS += libcore/serve/api-responses.o
LIBCORE_OBJS += libcore/serve/api-tools.o
LIBCORE_OBJS += libcore/serve/api-write-chat.o
LIBCORE_OBJS += libcore/serve/api-write-messages.o
LIBCORE_OBJS += libcore/serve/api-write-responses.o
LIBCORE_OBJS += libcore/serve/api-writer.o
LIBCORE_OBJS += libcore/serve/generate.o
LIBCORE_OBJS += libcore/serve/http-auth.o
LIBCORE_OBJS += libcore/serve/http-exchange.o
LIBCORE_OBJS += libcore/serve/http-listen.o
LIBCORE_OBJS += libcore/serve/http-watch.o
LIBCORE_OBJS += libcore/serve/http.o
LIBCORE_OBJS += libcore/serve/server.o
LIBCORE_OBJS += libcore/serve/textout.o
LIBCORE_OBJS += libcore/stats/stats.o
LIBCORE_OBJS += libcore/text/chat.o
LIBCORE_OBJS += libcore/text/jinja-eval.o
LIBCORE_OBJS += libcore/text/jinja-filters.o
LIBCORE_OBJS += libcore/text/jinja-lex.o
LIBCORE_OBJS += libcore/text/jinja-methods.o
LIBCORE_OBJS += libcore/text/jinja-parse.o
LIBCORE_OBJS += libcore/text/outparse-json.o
LIBCORE_OBJS += libcore/text/outparse.o
LIBCORE_OBJS += libcore/text/reasoning.o
LIBCORE_OBJS += libcore/text/template-json.o
LIBCORE_OBJS += libcore/text/template-value.o
LIBCORE_OBJS += libcore/text/template.o
LIBCORE_OBJS += libcore/text/tok-added.o
LIBCORE_OBJS += libcore/text/tok-bpe.o
LIBCORE_OBJS += libcore/text/tok-decode.o
LIBCORE_OBJS += libcore/text/tok-encode.o
LIBCORE_OBJS += libcore/text/tok-ids.o
LIBCORE_OBJS += libcore/text/tok-load.o
LIBCORE_OBJS += libcore/text/tok-model.o
LIBCORE_OBJS += libcore/text/tok-norm.o
LIBCORE_OBJS += libcore/text/tok-pretok.o
LIBCORE_OBJS += libcore/text/tok-regex.o
LIBCORE_OBJS += libcore/text/tok-unicode.o
LIBCORE_OBJS += libcore/text/tok-utf8.o
LIBCORE_OBJS += libcore/text/tok-vocab.o
LIBCORE_OBJS += libcore/text/toolcall-schema.o
LIBCORE_OBJS += libcore/text/toolcall-grammar.o
LIBCORE_OBJS += libcore/text/toolcall.o
LIBCORE_OBJS += libcore/spec/mtp.o
LIBCORE_OBJS += libcore/spec/ngram.o
LIBCORE_OBJS += libcore/spec/verify.o
LIBCORE_OBJS += libcore/tool/cleanup.o
LIBCORE_OBJS += libcore/tool/device.o
LIBCORE_OBJS += libcore/tool/main.o
LIBCORE_OBJS += libcore/tool/opt.o
LIBCORE_OBJS += libcore/tool/progress.o
LIBCORE_OBJS += libcore/tool/report.o
LIBCORE_OBJS += libcore/tp/tp.o
LIBCORE_OBJS += libcore/util/buf.o
LIBCORE_OBJS += libcore/util/err.o
LIBCORE_OBJS += libcore/util/file.o
LIBCORE_OBJS += libcore/util/hash.o
LIBCORE_OBJS += libcore/util/json.o
LIBCORE_OBJS += libcore/util/log.o
LIBCORE_OBJS += libcore/util/parse.o
LIBCORE_OBJS += libcore/util/rng.o
LIBCORE_OBJS += libcore/util/thread.o
ifeq ($(CUDA),1)
  LIBCORE_OBJS += libcore/backend/cuda/backend.o
  LIBCORE_OBJS += libcore/backend/cuda/blocks.o
  LIBCORE_OBJS += libcore/backend/cuda/forward.o
  LIBCORE_OBJS += libcore/backend/cuda/mtp.o
  LIBCORE_OBJS += libcore/backend/cuda/offload.o
  LIBCORE_OBJS += libcore/backend/cuda/state.o
  LIBCORE_OBJS += libcore/backend/cuda/weights.o
endif

PROGRAMS += capy-convert
PROGRAMS += capy-gate
PROGRAMS += capy-gen
PROGRAMS += capy-kvdump
PROGRAMS += capy-ppl
PROGRAMS += capy-serve
PROGRAMS += capy-shortlist

UNIT_TESTS += u-api
UNIT_TESTS += u-artifact
UNIT_TESTS += u-cpu-experts
UNIT_TESTS += u-engine
UNIT_TESTS += u-grammar
UNIT_TESTS += u-json-schema
UNIT_TESTS += u-kvstore
UNIT_TESTS += u-expert-cache
UNIT_TESTS += u-http
UNIT_TESTS += u-linear
UNIT_TESTS += u-mask
UNIT_TESTS += u-mtp
UNIT_TESTS += u-nvfp4
UNIT_TESTS += u-outparse
UNIT_TESTS += u-plan
UNIT_TESTS += u-ple-touch
UNIT_TESTS += u-safetensors
UNIT_TESTS += u-sample
UNIT_TESTS += u-sched
UNIT_TESTS += u-serve
UNIT_TESTS += u-spec
UNIT_TESTS += u-stats
UNIT_TESTS += u-template
UNIT_TESTS += u-tokenizer
UNIT_TESTS += u-toolcall-grammar
UNIT_TESTS += u-tp
UNIT_TESTS += u-tp-sim
UNIT_TESTS += u-util

TEST_HELPERS += capy-gen-scripted
TEST_HELPERS += capy-serve-scripted
TEST_HELPERS += capy-test-tool

FUZZERS += fuzz-api
FUZZERS += fuzz-artifact
FUZZERS += fuzz-grammar
FUZZERS += fuzz-hfconfig
FUZZERS += fuzz-json-schema
FUZZERS += fuzz-kventry
FUZZERS += fuzz-outparse
FUZZERS += fuzz-safetensors
FUZZERS += fuzz-template
FUZZERS += fuzz-tokenizer
FUZZERS += fuzz-toolcall-grammar

# GPU tests (make test-cuda, on a machine with an NVIDIA GPU): one source file each in t/cuda/.
CUDA_TESTS += u-cuda-model
CUDA_TESTS += u-cuda-gdn
CUDA_TESTS += u-cuda-linear
CUDA_TESTS += u-cuda-attention
CUDA_TESTS += u-cuda-sample
CUDA_TESTS += u-cuda-kvstore
CUDA_TESTS += u-cuda-offload
CUDA_TESTS += u-cuda-tp


BENCHES += expert-cache-bench
BENCHES += kvstore-bench
BENCHES += linear-bench
BENCHES += mask-bench
BENCHES += ple-fault-bench
BENCHES += spec-bench
BENCHES += spec-oracle-bench
BENCHES += step-bench
BENCHES += tokenizer-bench
BENCHES += tp-rounding-bench

LIB = $(O)/libcore.a
OBJS = $(addprefix $(O)/,$(LIBCORE_OBJS))
BINS = $(addprefix $(O)/bin/,$(PROGRAMS))
UNIT_BINS = $(addprefix $(O)/t/unit/,$(UNIT_TESTS))
HELPER_BINS = $(addprefix $(O)/t/helper/,$(TEST_HELPERS))
BENCH_BINS = $(addprefix $(O)/bench/,$(BENCHES))
CUDA_TEST_BINS = $(if $(filter 1,$(CUDA)),$(addprefix $(O)/t/cuda/,$(CUDA_TESTS)))
MANS = $(wildcard man/man1/*.1) $(wildcard man/man7/*.7)
PUBLIC_HEADERS = $(filter-out %-impl.h,$(wildcard libcore/*/*.h libcore/*/*/*.h)) libcore/core.h

.PHONY: all test test-cuda test-cuda-run test-only test-deps check unit bats check-docs check-headers fuzz bench deps install clean help demo serve
.DEFAULT_GOAL := all

# With CUDA, `all` builds the GPU tests too: CI compiles every kernel and test for both
# targets even though it cannot run them.
all: $(BINS) $(CUDA_TEST_BINS)

$(O)/%.o: %.c
	@mkdir -p $(dir $@)
	$(QUIET_CC)$(CC) $(CPPFLAGS) $(BASE_CFLAGS) $(CFLAGS) -c -o $@ $<

# Every kernel object depends on every kernel header (nvcc writes no dependency files here).
$(O)/kernels/%.o: kernels/%.cu $(wildcard kernels/*.h kernels/*.cuh)
	@mkdir -p $(dir $@)
	$(QUIET_NVCC)$(NVCC) $(NVCCFLAGS) -Ikernels -c -o $@ $<

$(LIB): $(OBJS) $(KERNEL_OBJS) Makefile $(wildcard config.mak)
	$(QUIET_AR)rm -f $@ && ar rcs $@ $(OBJS) $(KERNEL_OBJS)

$(O)/bin/%: $(O)/cmd/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(QUIET_LINK)$(CC) $(BASE_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# unit tests, test helpers and benchmarks: one source file each, linked with the library
$(UNIT_BINS) $(filter-out %-scripted,$(HELPER_BINS)) $(BENCH_BINS): $(O)/%: $(O)/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(QUIET_LINK)$(CC) $(BASE_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(O)/t/unit/%.o: CPPFLAGS += -It/unit
$(O)/t/cuda/%.o: CPPFLAGS += -It/unit -Ikernels

$(CUDA_TEST_BINS): $(O)/%: $(O)/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(QUIET_LINK)$(CC) $(BASE_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# The backend's loops vectorize at -O3 (GCC 12's -O2 only vectorizes loops without a remainder).
$(O)/libcore/backend/cpu/%.o: OPT = -O3

$(O)/t/helper/%: $(O)/t/helper/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(QUIET_LINK)$(CC) $(BASE_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# capy-gen and capy-serve with the scripted test backend (t/helper/scripted-backend.c).
$(O)/t/helper/capy-gen-scripted: $(O)/t/helper/capy-gen-scripted.o $(O)/t/helper/scripted-backend.o $(LIB)
	@mkdir -p $(dir $@)
	$(QUIET_LINK)$(CC) $(BASE_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(O)/t/helper/capy-serve-scripted: $(O)/t/helper/capy-serve-scripted.o $(O)/t/helper/scripted-backend.o $(LIB)
	@mkdir -p $(dir $@)
	$(QUIET_LINK)$(CC) $(BASE_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# --- tests ----------------------------------------------------------------------
# `make test`: installs what the tests need (test-deps), then the C unit tests, the BATS
# tests of every tool, the man pages and the headers.
test: test-deps
	$(QUIET)$(MAKE) --no-print-directory test-only

test-only: all unit bats check-docs check-headers

unit: $(UNIT_BINS)
	$(QUIET)set -e; for t in $(UNIT_BINS); do echo "*** $$t"; $$t; done

bats: all $(UNIT_BINS) $(HELPER_BINS)
	$(QUIET)CAPY_BUILD=$(abspath $(O)) CAPY_SAN=$(SAN) PATH="$(abspath $(O))/bin:$$PATH" bats t/

# `make test-cuda`: every GPU test on this machine's first GPU (CAPY_GPU picks another).
# test-cuda-run runs what is built (on a GPU machine given the build: t/cuda/device-run.sh).
test-cuda: all
	$(QUIET)$(MAKE) --no-print-directory test-cuda-run

test-cuda-run:
	$(QUIET)if [ "$(CUDA)" != 1 ]; then echo "make test-cuda: this build has no CUDA (nvcc not found, or CUDA=0)"; exit 2; fi
	$(QUIET)set -e; for t in $(CUDA_TEST_BINS); do echo "*** $$t"; $$t; done; echo "*** t/cuda/tools.sh"; CAPY_BUILD=$(O) t/cuda/tools.sh

# `make check`: the same tests built with AddressSanitizer and UBSan.
check:
	$(MAKE) O=build/san SAN=1 OPT=-O1 CUDA=0 test-only

check-docs:
	$(QUIET)set -e; for m in $(MANS); do \
		out=$$(groff -man -ww -z $$m 2>&1); \
		if [ -n "$$out" ]; then echo "$$m: $$out"; exit 1; fi; done; echo "man pages: ok"

check-headers:
	$(QUIET)set -e; for h in $(PUBLIC_HEADERS); do \
		$(CC) $(CPPFLAGS) $(BASE_CFLAGS) -fsyntax-only -x c $$h -o /dev/null; done; \
		echo "headers: ok"

# `make bench`: the benchmark programs (run by bench/*.sh; results in docs/perf.md).
bench: $(BENCH_BINS)

# `make fuzz`: libFuzzer targets (clang); run one with build/fuzz/t/fuzz/fuzz-X t/fuzz/corpus/X
fuzz:
	$(MAKE) O=build/fuzz CC=clang SAN=0 CUDA=0 OPT="-O1 -fsanitize=fuzzer-no-link,address,undefined" \
		LDFLAGS="-fsanitize=address,undefined" fuzzers

fuzzers: $(addprefix $(O)/t/fuzz/,$(FUZZERS))

$(O)/t/fuzz/%: $(O)/t/fuzz/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(QUIET_LINK)$(CC) $(BASE_CFLAGS) $(CFLAGS) -fsanitize=fuzzer $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# python3-jinja2: the reference renderer the template tests compare against (t/helper/jinja-render.py);
# python3-jsonschema: the validator of the documents drawn from schema grammars (t/helper/schema-validate.py);
# curl and jq: the capy-serve tests' client and their JSON reader (t/helper/serve.bash); iproute2
# and util-linux: the agent tests' loopback-only network namespace (ip, unshare).
DEPS_APT = build-essential pkg-config bats groff-base clang libclang-rt-14-dev iproute2 util-linux \
	libzstd-dev libcjson-dev libmicrohttpd-dev libpcre2-dev libutf8proc-dev libxxhash-dev nettle-dev zstd \
	python3 python3-jinja2 python3-jsonschema curl jq

# Installs only what is missing; without root it prints the one command to run and fails.
deps:
	@missing=$$(for p in $(DEPS_APT); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "    APT $$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "capy needs these Debian packages; run:"; echo "    sudo apt-get install -y" $$missing; exit 1; fi

# The npm packages of the tests, pinned by the lockfiles in t/*/ (the Hugging Face tokenizers
# oracle, the official API clients, the agent CLIs); `npm ci` again only when a lockfile changed.
NPM_LOCKS = $(wildcard t/*/package-lock.json)

test-deps: deps
	@command -v node >/dev/null && command -v npm >/dev/null || \
		{ echo "the tests need Node.js (20 or later) and npm on PATH"; exit 1; }
	$(QUIET)set -e; for lock in $(NPM_LOCKS); do d=$$(dirname $$lock); \
		if [ ! -f $$d/node_modules/.capy-npm-ci ] || [ $$lock -nt $$d/node_modules/.capy-npm-ci ]; then \
			echo "    NPM $$d"; (cd $$d && npm ci --no-audit --no-fund --loglevel=error); \
			touch $$d/node_modules/.capy-npm-ci; \
		fi; done

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(wildcard man/man1/*.1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(wildcard man/man7/*.7) $(DESTDIR)$(PREFIX)/share/man/man7/

# `make serve`: the server on capy-tiny (share/models: a 7M-parameter model trained here; it
# calls its toy tools and greets, little more) at SERVE_HOST:SERVE_PORT, after installing and
# building what it needs.
SERVE_HOST ?= 127.0.0.1
SERVE_PORT ?= 8080
SERVE_MODEL = $(O)/serve/capy-tiny.capy

$(SERVE_MODEL): $(wildcard share/models/capy-tiny/*) | $(O)/bin/capy-convert
	@mkdir -p $(dir $@)
	$(QUIET)$(O)/bin/capy-convert -q -m share/models/capy-tiny -o $@

serve: deps
	$(QUIET)$(MAKE) --no-print-directory all
	$(QUIET)$(MAKE) --no-print-directory $(SERVE_MODEL)
	@sh examples/serving/hello.sh $(SERVE_HOST) $(SERVE_PORT) capy-tiny
	exec $(O)/bin/capy-serve $(SERVE_MODEL) --host $(SERVE_HOST) --port $(SERVE_PORT) --model-id capy-tiny

# `make demo`: capy-tiny answers a question and calls a tool, through capy-gen.
demo: all $(SERVE_MODEL)
	$(O)/bin/capy-convert --inspect $(SERVE_MODEL) | sed -n '1,5p'
	@echo "--- capy-gen --chat: a greeting ---"
	$(O)/bin/capy-gen -q $(SERVE_MODEL) --chat --no-think -p "Hello! Who are you?" -n 64 --temp 0
	@echo "--- capy-gen --chat with the toy tools (examples/tiny-tools.json): a tool call ---"
	$(O)/bin/capy-gen -q $(SERVE_MODEL) --chat --messages examples/tiny-tools.json -n 96 --temp 0

clean:
	rm -rf build $(O)

help:
	@echo "make            build libcore.a and the tools into $(O)/"
	@echo "make serve      install, build and serve the bundled capy-tiny model on 127.0.0.1:8080"
	@echo "make demo       build, then capy-tiny greets and calls a tool"
	@echo "make test       install the test dependencies, then unit tests, BATS tests, man pages and headers (CPU only)"
	@echo "make test-cuda  the GPU tests of t/cuda (a machine with an NVIDIA GPU; docs/testing.md)"
	@echo "make check      the tests again under ASan + UBSan (build/san/)"
	@echo "make fuzz       build the libFuzzer targets (build/fuzz/)"
	@echo "make bench      build the benchmark programs (build/bench/)"
	@echo "make demo       convert a bundled tiny model and run one chat generation"
	@echo "make deps       install the Debian packages (as root), else print the apt-get line"
	@echo "make install    install the tools and man pages under PREFIX=$(PREFIX)"
	@echo "options: V=1 (verbose)  CUDA=0|1  SAN=1  O=<dir>"

-include $(OBJS:.o=.d) $(O)/cmd/*.d $(O)/t/unit/*.d $(O)/t/cuda/*.d $(O)/t/helper/*.d $(O)/t/fuzz/*.d $(O)/bench/*.d

.SECONDARY:
