#!/usr/bin/env node
// gen-unicode-tables.js - regenerate libcore/text/tok-unicode.c.
//
// The Hugging Face tokenizers library (Rust 0.22.2, what @anush008/tokenizers@0.6.0 is built
// from) runs pre-tokenizer regexes with Oniguruma 6.9.10 (Unicode 16.0) and normalizes with
// unicode-normalization-alignments 0.1.12 (Unicode 9.0 tables). We use PCRE2 10.42 (Unicode 14.0)
// and utf8proc 2.8 (Unicode 15.0). This script measures the differences and writes them down:
//   - for each class escape we translate, the code points Oniguruma has and PCRE2 lacks (it
//     fails if PCRE2 has any Oniguruma lacks, since a class cannot subtract them);
//   - the code points that utf8proc's normalization can touch but that were not yet assigned in
//     Unicode 9.0 (Perl's Unicode::UCD gives the age), which HF's NFC leaves alone.
//
// usage: (cd t/ext && npm ci && node gen-unicode-tables.js > ../../libcore/text/tok-unicode.c)
// Needs gcc, libpcre2-dev, libutf8proc-dev and perl.
"use strict";
const { execFileSync } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");
const { Tokenizer } = require("@anush008/tokenizers");

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "capy-unicode-"));
const helper = path.join(tmp, "unicode-sets");
execFileSync("gcc", ["-O2", path.join(__dirname, "unicode-sets.c"), "-o", helper, "-lpcre2-8", "-lutf8proc"]);
const run = (args) => JSON.parse(execFileSync(helper, args, { maxBuffer: 1 << 28 }).toString());

// Every scalar value once, in order: Oniguruma sees the whole string, so one Split pass tells
// which code points a class matches.
const every = [];
for (let c = 0; c <= 0x10ffff; c++) if (c < 0xd800 || c > 0xdfff) every.push(String.fromCodePoint(c));
const everyString = every.join("");

function onigSet(cls) {
	if (Array.isArray(cls)) { // a union
		const u = new Set();
		for (const c of cls) for (const x of onigSet(c)) u.add(x);
		return u;
	}
	const json = {
		version: "1.0", truncation: null, padding: null, added_tokens: [], normalizer: null,
		pre_tokenizer: { type: "Split", pattern: { Regex: cls + "+" }, behavior: "Removed", invert: true },
		post_processor: null, decoder: null,
		model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
			end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
			vocab: { a: 0 }, merges: [] },
	};
	const tok = Tokenizer.fromString(JSON.stringify(json));
	const set = new Set();
	for (const [piece] of tok.getPreTokenizer().preTokenizeString(everyString))
		for (const ch of piece) set.add(ch.codePointAt(0));
	return set;
}

const expand = (ranges) => { const s = new Set(); for (const [a, b] of ranges) for (let c = a; c <= b; c++) s.add(c); return s; };
function toRanges(set) {
	const r = [];
	for (const c of [...set].sort((a, b) => a - b)) {
		if (r.length && r[r.length - 1][1] + 1 === c) r[r.length - 1][1] = c;
		else r.push([c, c]);
	}
	return r;
}

// name used by tok-regex.c, Oniguruma class, PCRE2 class text that the extras complete
const classes = [
	["L", "\\p{L}", "\\p{L}"],
	["M", "\\p{M}", "\\p{M}"],
	["N", "\\p{N}", "\\p{N}"],
	["Nd", "\\p{Nd}", "\\p{Nd}"],
	["P", "\\p{P}", "\\p{P}"],
	["S", "\\p{S}", "\\p{S}"],
	["Lu", "\\p{Lu}", "\\p{Lu}"],
	["Ll", "\\p{Ll}", "\\p{Ll}"],
	["Lt", "\\p{Lt}", "\\p{Lt}"],
	["Lm", "\\p{Lm}", "\\p{Lm}"],
	["Lo", "\\p{Lo}", "\\p{Lo}"],
	["Z", "\\p{Z}", "\\p{Z}"],
	["s", "\\s", ""],
	["w", "\\w", "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"],
	// Rust regex's \w (UTS #18), which HF's single_word check uses; same Unicode version
	["rust_w", ["\\p{Alphabetic}", "\\p{M}", "\\p{Nd}", "\\p{Pc}", "\\p{Join_Control}"],
		"\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}"],
];

const hex = (c) => "0x" + c.toString(16).padStart(4, "0");
function emitRanges(name, ranges) {
	let out = `static const uint32_t ${name}[][2] = {\n`;
	for (let i = 0; i < ranges.length; i += 4)
		out += "\t" + ranges.slice(i, i + 4).map(([a, b]) => `{ ${hex(a)}, ${hex(b)} },`).join(" ") + "\n";
	if (!ranges.length) out += "\t{ 0, 0 }, /* none */\n";
	return out + "};\n";
}

let body = "";
const entries = [];
for (const [name, onig, pcre] of classes) {
	const o = onigSet(onig);
	const p = pcre ? expand(run(["pcre2", "[" + pcre + "]"])) : new Set();
	const lacking = [...p].filter((c) => !o.has(c));
	if (lacking.length)
		throw new Error(`PCRE2 [${pcre}] has ${lacking.length} code points Oniguruma ${onig} lacks`);
	const extra = toRanges(new Set([...o].filter((c) => !p.has(c))));
	body += emitRanges(`extra_${name}`, extra);
	entries.push(`\t{ "${name}", "${pcre.replace(/\\/g, "\\\\")}", extra_${name}, ${extra.length} },`);
}

// Normalization: code points utf8proc may change or reorder, assigned after Unicode 9.0.
const active = run(["nfc-active"]);
const cps = [];
for (const [a, b] of active) for (let c = a; c <= b; c++) cps.push(c);
const ages = execFileSync("perl", ["-MUnicode::UCD=charprop", "-ne", 'chomp; print charprop(hex($_), "Age"), "\\n"'],
	{ input: cps.map((c) => c.toString(16)).join("\n") + "\n", maxBuffer: 1 << 26 }).toString().trim().split("\n");
const old = /^V([1-8]_\d|9_0)$/;
const late = new Set(cps.filter((c, i) => !old.test(ages[i])));
const lateRanges = toRanges(late);

fs.rmSync(tmp, { recursive: true });
const pcre2Version = execFileSync("pcre2-config", ["--version"]).toString().trim();
process.stdout.write(`/* tok-unicode.c - Unicode data where the libraries we use differ from Hugging Face tokenizers.
 *
 * Generated by t/ext/gen-unicode-tables.js from @anush008/tokenizers@0.6.0 (Oniguruma 6.9.10,
 * Unicode 16.0), PCRE2 ${pcre2Version} (Unicode 14.0), utf8proc 2.8 (Unicode 15.0) and Perl's
 * Unicode::UCD ages. Do not edit; regenerate.
 */
#include "tokenizer-impl.h"

${body}
const struct tok_class_extra tok_class_extras[] = {
${entries.join("\n")}
};
const size_t tok_n_class_extras = ${entries.length};

/* Code points utf8proc's normalization may change or reorder that Unicode 9.0 (HF's NFC tables)
 * had not assigned: HF treats them as plain starters. */
${emitRanges("late_norm", lateRanges)}
const uint32_t (*const tok_late_norm)[2] = late_norm;
const size_t tok_n_late_norm = ${lateRanges.length};
`);
