#!/bin/sh
# pack-libs.sh - copy the shared libraries of this machine that the built binaries need and
# a machine without this project's dependencies may lack (cJSON, utf8proc, libmicrohttpd and
# its libunistring) into .devlibs/ (git-ignored), for t/cuda/device-run.sh there.
set -eu
cd "$(dirname "$0")/../.."
mkdir -p .devlibs
for l in libcjson.so.1 libutf8proc.so.2 libmicrohttpd.so.12 libunistring.so.2; do
	p=$(/sbin/ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')
	[ -n "$p" ] || { echo "pack-libs: $l not found" >&2; exit 1; }
	cp -L "$p" .devlibs/
done
ls -l .devlibs
