#!/bin/sh
# device-run.sh - run the GPU tests on a machine that has a GPU but not this project's build
# dependencies (the H200 machine of the `device` tool: Ubuntu, no cJSON, utf8proc or
# libmicrohttpd). The build is made elsewhere (make; then t/cuda/pack-libs.sh copies the
# shared libraries the binaries need into .devlibs/) and travels with the tree; this script
# points the loader at .devlibs and runs make test-cuda-run on it, logging to $OUT when set.
# CAPY_COMMIT names the commit in the log (a copied tree's .git may not be the build's).
#
#	CAPY_COMMIT=$(git rev-parse --short HEAD) t/cuda/device-run.sh [make arguments...]
set -u
cd "$(dirname "$0")/../.." || exit 2
export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CAPY_SRCDIR="$PWD"
log=${OUT:-/tmp}/test-cuda.log
{
	echo "# $(date -u +%Y-%m-%dT%H:%MZ) commit ${CAPY_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")}"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/# gpu: /'
	echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
} >"$log"
make --no-print-directory "$@" test-cuda-run 2>&1 | tee -a "$log"
rc=$?
echo "# exit $rc" >>"$log"
exit $rc
