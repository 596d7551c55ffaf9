#!/usr/bin/env bats
# Every tool: --help and --version on stdout with exit 0, bad usage on stderr with
# exit 2, and a man page whose SYNOPSIS lists the same forms as --help.

load lib

tools() {
	ls "$BUILD/bin"
}

@test "every tool prints its usage with --help, exit 0" {
	for t in $(tools); do
		run --separate-stderr "$t" --help
		[ "$status" -eq 0 ]
		[[ "${lines[0]}" == "usage: $t"* ]]
		[ -z "$stderr" ]
	done
}

@test "every tool prints its version with --version" {
	for t in $(tools); do
		run --separate-stderr "$t" --version
		[ "$status" -eq 0 ]
		[[ "$output" =~ ^$t\ [0-9]+\.[0-9]+\.[0-9]+$ ]]
	done
}

@test "an unknown option is a usage error: exit 2, message and usage on stderr, nothing on stdout" {
	for t in $(tools); do
		run --separate-stderr "$t" --no-such-option
		[ "$status" -eq 2 ]
		[ -z "$output" ]
		[[ "${stderr_lines[0]}" == "$t: error: unknown option '--no-such-option'" ]]
		[[ "${stderr_lines[1]}" == "usage: $t"* ]]
	done
}

@test "a bad CAPY_LOG is refused with exit 2" {
	for t in $(tools); do
		CAPY_LOG=loud run --separate-stderr "$t" --help
		[ "$status" -eq 2 ]
		[[ "$stderr" == *"CAPY_LOG='loud'"* ]]
	done
}

@test "a bad CAPY_ISA (unknown, or beyond this CPU) is refused with exit 2" {
	for t in $(tools); do
		CAPY_ISA=mmx run --separate-stderr "$t" --help
		[ "$status" -eq 2 ]
		[[ "$stderr" == "$t: error: CAPY_ISA='mmx' is not scalar, avx2, avx512 or avx512-vnni (this CPU's best: "* ]]
	done
	CAPY_ISA=scalar run --separate-stderr capy-gen --help
	[ "$status" -eq 0 ]
}

@test "every tool has a man page whose SYNOPSIS matches --help" {
	for t in $(tools); do
		page="$SRC/man/man1/$t.1"
		[ -f "$page" ]
		# The usage lines, without "usage: " / "   or: ", as groff renders the SYNOPSIS.
		"$t" --help | sed -n 's/^usage: //p; s/^   or: //p' >"$BATS_TEST_TMPDIR/help"
		MANWIDTH=400 man -l "$page" 2>/dev/null | col -b |
			sed -n '/^SYNOPSIS/,/^DESCRIPTION/p' | sed '1d;$d' | sed 's/^ *//; /^$/d' >"$BATS_TEST_TMPDIR/man"
		diff -u "$BATS_TEST_TMPDIR/help" "$BATS_TEST_TMPDIR/man"
	done
}

@test "the toolkit overview page capy(7) exists and names every tool" {
	page="$SRC/man/man7/capy.7"
	[ -f "$page" ]
	for t in $(tools); do
		grep -q "$t" "$page"
	done
}
