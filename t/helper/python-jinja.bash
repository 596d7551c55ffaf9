# python-jinja.bash - shared by the template BATS tests: the tool under test and the reference.
#
# PYTHON_JINJA is the first of $CAPY_PYTHON, python3 and /usr/bin/python3 that can import
# jinja2 (`make deps` installs Debian's python3-jinja2). Without one the tests fail: they
# cannot say anything about byte-for-byte agreement.
#
# A test queues its renders (queue_render), lets the reference render them all in one Python
# process (run_reference), then compares each with capy's rendering (compare_render).

TOOL="$CAPY_BUILD/t/helper/capy-test-tool"
REF="$BATS_TEST_DIRNAME/helper/jinja-render.py"

find_python_jinja() {
	local py
	for py in ${CAPY_PYTHON:-} python3 /usr/bin/python3; do
		# sys.executable skips wrappers such as pyenv's shims, which are slow to start
		if "$py" -c 'import sys, jinja2, jinja2.sandbox, jinja2.ext; print(sys.executable)' \
			2>/dev/null; then
			return 0
		fi
	done
	echo "no python3 with jinja2 found (run 'make deps' or set CAPY_PYTHON)" >&2
	return 1
}

# queue_render DIR NAME ARGS...: a render job for the reference (arguments without tabs).
queue_render() {
	local dir=$1 name=$2
	shift 2
	{
		printf '%s' "$name"
		printf '\t%s' "$@"
		printf '\n'
	} >>"$dir/jobs"
}

run_reference() {
	"$PYTHON_JINJA" "$REF" batch "$1/jobs" "$1"
}

# compare_render DIR NAME ARGS...: render with capy and compare exit status and bytes with the
# reference's result for NAME. Prints a report and returns 1 on a difference.
compare_render() {
	local dir=$1 name=$2 prc crc
	shift 2
	prc=$(cat "$dir/$name.py.rc")
	"$TOOL" "$@" >"$dir/$name.c.out" 2>"$dir/$name.c.err" && crc=0 || crc=$?
	if [ "$prc" = 0 ] && [ "$crc" = 0 ]; then
		if ! cmp -s "$dir/$name.py.out" "$dir/$name.c.out"; then
			echo "$name: output differs from jinja2"
			diff -u "$dir/$name.py.out" "$dir/$name.c.out" | head -20
			return 1
		fi
	elif [ "$prc" = 0 ] || [ "$crc" = 0 ]; then
		echo "$name: jinja2 exit $prc, capy exit $crc"
		cat "$dir/$name.py.err" "$dir/$name.c.err"
		return 1
	fi
	return 0
}
