#!/usr/bin/env node
// hf-tokenizer.js - the Hugging Face tokenizers library (Rust 0.22.2 through
// @anush008/tokenizers@0.6.0) as an oracle for capy's tokenizer.
//
//   node hf-tokenizer.js gen SEED COUNT [--invalid]   random test strings, one hex line each
//   node hf-tokenizer.js check TOKENIZER.json INPUT.hex MODE=OURS... [--lossy]
//   node hf-tokenizer.js encode TOKENIZER.json < INPUT.hex   HF's output in the tool's format
//   node hf-tokenizer.js golden TOKENIZER.json FILE...   NAME<TAB>HF output for each whole file
//   node hf-tokenizer.js variant-added IN.json OUT.json   IN with added-token options set
//
// check compares, line by line, the output of `capy-test-tool tokenize --hex --decode` (OURS)
// with HF: ids, decode(ids) and decode(ids, skip_special_tokens). MODE says which added tokens
// the tool was told to recognise (its --parse): "all" is HF's encode; "plain" is HF with
// encode_special_tokens (special tokens are given contents that never occur, which keeps every
// id); "special" the reverse; "none" is HF with no added token matchable. Decoding always uses
// the real tokenizer.
// Input lines that are not valid UTF-8 reach HF through Node's UTF-8 decoder (U+FFFD for each
// maximal invalid subsequence); with --lossy ours must match that, else it must report an error.
"use strict";
const fs = require("fs");
const { Tokenizer } = require("@anush008/tokenizers");

// --- deterministic random strings -------------------------------------------------------------

function rng(seed) {
	// xorshift128+ on BigInt-free 32-bit halves (mulberry32 streams), enough for test data
	let a = seed >>> 0, b = (seed * 2654435761) >>> 0;
	const next = () => {
		a = (a + 0x6d2b79f5) >>> 0;
		let t = a ^ b;
		b = (b + 0x9e3779b9) >>> 0;
		t = Math.imul(t ^ (t >>> 15), t | 1);
		t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
	const int = (n) => Math.floor(next() * n);
	const pick = (arr) => arr[int(arr.length)];
	const range = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));
	return { next, int, pick, range };
}

const WORDS = ("the of and to in is you that it he was for on are as with his they at be this " +
	"have from or one had by word but not what all were we when your can said there use an each " +
	"which she do how their if will up other about out many then them these so some her would make " +
	"like him into time has look two more write go see number no way could people my than first " +
	"water been call who oil its now find long down day did get come made may part Hello World " +
	"The Quick Brown FOX jumps lazy dog I'm don't can't won't it's we'll they've she'd you're " +
	"We'LL IT'S DON'T O'Neil rock'n'roll naïve café résumé Straße İstanbul ﬁnance").split(" ");
const CODE = [
	"int main(void) {\r\n\treturn 0;\r\n}\r\n", "def f(x):\n    return x ** 2\n", "\t\tif (a && b) {",
	"for (i = 0; i < n; i++)", "x += 1;", "=>", "!==", "::", "->", "#include <stdio.h>", "}\n\n",
	"{\"key\": [1, 2.5, true, null]}", "<div class=\"a\">", "https://example.com/a?b=c&d=e#f",
	"/usr/lib/x86_64-linux-gnu", "SELECT * FROM t WHERE id = 42;", "    ", "\t", "```python\n",
	"// comment", "/* block */", "$HOME", "`cmd`", "a_b_c", "CamelCase", "snake_case_name", "__init__",
	"0x1F", "1e-10", "3.14159", "-42", "i++", "x<<=2", "@decorator", "print('hi')", "'\\n'",
];
const SPECIALS = [
	"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
	"<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
	"<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
	"</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
	"<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
];
const NEAR = [
	"<|im_start", "<|im_start |>", "<|IM_END|>", "<|im_end|>x", "x<think>y", "<think", "think>",
	"<|endoftext|", "<|<|im_end|>", "<<|im_start|>", "<|im_start|>|>", "< think>", "</think >",
	"<|im_end|", "|>", "<|", "<tool_call", "<|fim_prefix", "<|im_start|><|im_end|>",
];
const SPACES = [" ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n\n", "\u00a0", "\u3000", "\u2028",
	"\u2029", "\u0085", "\ufeff", "\u180e", "\u200b", "\u2003", "\u2009", "\u000b", "\u000c",
	"\u001c", "\u001f", " \n ", "\t\n", "        "];
const MARKS = [[0x300, 0x36f], [0x483, 0x489], [0x591, 0x5c7], [0x610, 0x61a], [0x64b, 0x65f],
	[0x900, 0x903], [0x93a, 0x94f], [0x951, 0x957], [0xe31, 0xe31], [0xe34, 0xe3a], [0xe47, 0xe4e],
	[0x1ab0, 0x1abe], [0x1dc0, 0x1df5], [0x20d0, 0x20f0], [0xfe20, 0xfe2f], [0x1df6, 0x1dff],
	[0x0898, 0x089f], [0x302a, 0x302f], [0x3099, 0x309a]];
const BASES = "aeiouAEIOUnscgkhzyw" + "अकनहब" + "กขค" + "שבא" + "بتث" + "ᄀᄁ가" + "=<>";

function randomPiece(r, invalid) {
	const k = r.int(invalid ? 15 : 14);
	switch (k) {
	case 0: case 1: { // English
		let s = r.pick(WORDS);
		if (r.int(4) === 0) s = s.toUpperCase();
		return (r.int(3) ? " " : "") + s + (r.int(6) === 0 ? r.pick([",", ".", "!", "?", ";", ":", "'s", "’s", "'S", "'ll"]) : "");
	}
	case 2: return r.pick(CODE);
	case 3: { // CJK, kana, Hangul, fullwidth
		const blocks = [[0x4e00, 0x9fff], [0x3040, 0x309f], [0x30a0, 0x30ff], [0xac00, 0xd7a3],
			[0xff01, 0xff5e], [0x3000, 0x303f], [0x1100, 0x11ff], [0x20000, 0x2a6df], [0x31350, 0x323af]];
		let s = "";
		for (let n = 1 + r.int(6); n > 0; n--) { const b = r.pick(blocks); s += r.range(b[0], b[1]); }
		return s;
	}
	case 4: { // letters with combining marks, decomposed forms, jamo
		let s = r.pick([...BASES]);
		for (let n = r.int(4); n > 0; n--) { const b = r.pick(MARKS); s += r.range(b[0], b[1]); }
		if (r.int(4) === 0) s += r.pick(["e\u0301", "A\u030a", "\u1100\u1161\u11a8", "\u0915\u093c", "n\u0303", "\u212b", "\u0344",
			"\uac00\u11a7", "\u1100\u1161\u11a7", "\uac00\u11a8", "\uac01\u11a8", "\uc8e0\u11c3"]);
		return s;
	}
	case 5: { // emoji, skin tones, ZWJ sequences, flags, keycaps
		const e = () => r.range(0x1f600, 0x1f64f);
		return r.pick([
			() => e(), () => e() + r.range(0x1f3fb, 0x1f3ff),
			() => "\u{1f468}\u200d\u{1f469}\u200d\u{1f467}\u200d\u{1f466}",
			() => e() + "\u200d" + e(), () => r.range(0x1f1e6, 0x1f1ff) + r.range(0x1f1e6, 0x1f1ff),
			() => r.pick("0123456789#*") + "\ufe0f\u20e3", () => "\u2764\ufe0f", () => r.range(0x1f300, 0x1faff),
		])();
	}
	case 6: { // digits
		return r.pick([
			() => String(r.int(1e9)), () => "1234567", () => r.range(0x660, 0x669) + r.range(0x660, 0x669),
			() => r.range(0xff10, 0xff19), () => "²³¹½¾Ⅻ", () => String(r.next() * 1000), () => "2024-01-01",
			() => r.range(0x10d40, 0x10d49), () => r.range(0x1e5f1, 0x1e5fa),
		])();
	}
	case 7: return r.pick(SPACES).repeat(1 + (r.int(5) === 0 ? r.int(20) : 0));
	case 8: return r.pick(SPECIALS);
	case 9: return r.pick(NEAR);
	case 10: return r.pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'ſ", "'K", "’", "'", "—", "…", "«»", "€$¥", "!!!", "...", "?!", "''", "\"", "@#%^&*()"]);
	case 11: { // any scalar value, assigned or not
		let c = r.int(0x110000);
		if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
		return String.fromCodePoint(c);
	}
	case 12: return String.fromCodePoint(r.int(0x800) + (r.int(2) ? 0 : 0x2000)); // BMP punctuation, Latin, ...
	case 13: return r.pick(["\ud800", "\udfff", "a\udc00b", "\ud83d"]); // lone surrogates: U+FFFD in HF
	case 14: return { bytes: r.pick([[0x80], [0xff], [0xc0, 0x80], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80],
		[0xf4, 0x90, 0x80, 0x80], [0xf5], [0xe1, 0x80], [0xf0, 0x9f, 0x98], [0xc3], [0xfe, 0xfe]]) };
	}
}

function gen(seed, count, invalid) {
	const r = rng(seed);
	const out = [];
	for (let i = 0; i < count; i++) {
		const n = r.int(50) === 0 ? 50 + r.int(150) : 1 + r.int(12);
		const parts = [];
		for (let k = 0; k < n; k++) {
			const p = randomPiece(r, invalid);
			parts.push(typeof p === "string" ? Buffer.from(p, "utf8") : Buffer.from(p.bytes));
		}
		out.push(Buffer.concat(parts).toString("hex"));
	}
	return out.join("\n") + "\n";
}

// --- HF side ---------------------------------------------------------------------------------

// HF with some added tokens made unmatchable, every id kept: a token whose content is in the
// vocabulary is dropped (its id is the vocabulary's anyway), any other gets a content that never
// occurs (ids are assigned in order, so the others keep theirs). "plain" hides the special
// tokens, "special" the others, "none" all.
// Whether a token is special is a property of its content (HF's special_tokens_set), so repeats
// of a content are hidden together.
function variant(json, mode) {
	const j = JSON.parse(json);
	const special = new Set(j.added_tokens.filter((t) => t.special).map((t) => t.content));
	const hidden = (t) => mode === "none" || (mode === "plain") === special.has(t.content);
	const names = new Map();
	j.added_tokens = j.added_tokens.filter((t) => !(hidden(t) && t.content in j.model.vocab));
	for (const t of j.added_tokens) {
		if (!hidden(t))
			continue;
		if (!names.has(t.content))
			names.set(t.content, "\u0000capy-unmatchable-" + names.size);
		t.content = names.get(t.content);
	}
	return Tokenizer.fromString(JSON.stringify(j));
}

// Where two tool lines differ, for the report.
function describe(want, got) {
	const [wi, ...wd] = want.split("\t"), [gi, ...gd] = got.split("\t");
	const a = wi.split(" "), b = gi.split(" ");
	let k = 0;
	while (k < a.length && a[k] === b[k]) k++;
	if (k < a.length || k < b.length)
		return `ids differ at #${k}: HF ...${a.slice(Math.max(0, k - 3), k + 4).join(" ")}... ours ...${b.slice(Math.max(0, k - 3), k + 4).join(" ")}...`;
	return wd[0] !== gd[0] ? `decode differs: HF ${wd[0]} ours ${gd[0]}` : `decode(skip special) differs: HF ${wd[1]} ours ${gd[1]}`;
}

// HF's view of each input: ids, decode and decode skipping special tokens (as hex), and whether
// the bytes were valid UTF-8. Batched: far fewer crossings into the native module.
async function hfLines(encTok, decTok, inputs) {
	const out = [];
	for (let i = 0; i < inputs.length; i += 500) {
		const bytes = inputs.slice(i, i + 500);
		const texts = bytes.map((b) => b.toString("utf8"));
		const enc = await encTok.encodeBatch(texts, { addSpecialTokens: false });
		const ids = enc.map((e) => e.getIds());
		const d0 = await decTok.decodeBatch(ids, false);
		const d1 = await decTok.decodeBatch(ids, true);
		for (let k = 0; k < bytes.length; k++)
			out.push({
				ids: ids[k],
				d0: Buffer.from(d0[k], "utf8").toString("hex"),
				d1: Buffer.from(d1[k], "utf8").toString("hex"),
				valid: Buffer.from(texts[k], "utf8").equals(bytes[k]),
			});
	}
	return out;
}

async function check(tokPath, inputPath, specs, lossy) {
	const json = fs.readFileSync(tokPath, "utf8");
	const full = Tokenizer.fromString(json);
	const input = fs.readFileSync(inputPath, "utf8").split("\n").filter((l) => l.length || false);
	let bad = 0, total = 0;
	for (const spec of specs) {
		const [mode, oursPath] = spec.split("=");
		const tok = mode === "all" ? full : variant(json, mode);
		const ours = fs.readFileSync(oursPath, "utf8").split("\n");
		if (ours.length < input.length) {
			console.log(`${mode}: ${oursPath} has ${ours.length} lines for ${input.length} inputs`);
			bad++;
			continue;
		}
		const all = await hfLines(tok, full, input.map((h) => Buffer.from(h, "hex")));
		for (let i = 0; i < input.length; i++) {
			const bytes = Buffer.from(input[i], "hex");
			const hf = all[i];
			total++;
			let want;
			if (!hf.valid && !lossy)
				want = "error:";
			else
				want = `${hf.ids.join(" ")}\t${hf.d0}\t${hf.d1}`;
			const got = ours[i];
			if (want === "error:" ? !got.startsWith("error: text is not valid UTF-8") : got !== want) {
				bad++;
				if (bad <= 10)
					console.log(`${mode} line ${i + 1}: text ${JSON.stringify(bytes.toString("utf8"))} (hex ${input[i]})\n  ${want === "error:" ? "HF cannot see invalid UTF-8, ours: " + got : describe(want, got)}`);
			}
		}
	}
	console.log(`${tokPath.split("/").pop()}: ${total} comparisons, ${bad} mismatches`);
	return bad ? 1 : 0;
}

async function encodeAll(tokPath) {
	const tok = Tokenizer.fromString(fs.readFileSync(tokPath, "utf8"));
	const lines = fs.readFileSync(0, "utf8").split("\n").filter((l) => l.length);
	const all = await hfLines(tok, tok, lines.map((l) => Buffer.from(l, "hex")));
	process.stdout.write(all.map((hf) => `${hf.ids.join(" ")}\t${hf.d0}\t${hf.d1}`).join("\n") + "\n");
}

async function golden(tokPath, files) {
	const tok = Tokenizer.fromString(fs.readFileSync(tokPath, "utf8"));
	const all = await hfLines(tok, tok, files.map((f) => fs.readFileSync(f)));
	files.forEach((f, i) => process.stdout.write(`${f.split("/").pop()}\t${all[i].ids.join(" ")}\t${all[i].d0}\t${all[i].d1}\n`));
}

// The Qwen3 tokenizer with every added-token option in use, for options its own file leaves off:
// lstrip, rstrip, single_word, normalized tokens, and new tokens (some already in the vocabulary).
function variantAdded(inPath, outPath) {
	const j = JSON.parse(fs.readFileSync(inPath, "utf8"));
	const set = (content, opts) => Object.assign(j.added_tokens.find((t) => t.content === content), opts);
	set("<|im_start|>", { lstrip: true });
	set("<|im_end|>", { rstrip: true });
	set("<think>", { single_word: true });
	set("</think>", { normalized: true });
	set("<tool_call>", { lstrip: true, rstrip: true });
	set("<|fim_prefix|>", { single_word: true, lstrip: true });
	let id = 151669;
	const add = (content, opts) => j.added_tokens.push(Object.assign({ id: id++, content, single_word: false,
		lstrip: false, rstrip: false, normalized: true, special: false }, opts));
	add("é");                               // a byte-level character: takes the vocabulary's id
	add("e\u0301x");                        // matched after NFC, as "éx"
	add("hello world", { single_word: true });
	add("ﬁ", { normalized: false });
	add("'s", { special: true, normalized: false, rstrip: true });
	add("\u3000", { special: true, lstrip: true });
	add("Ġthe", { special: true });          // in the vocabulary
	// repeats: one equal in every field (ignored), others that change the flags
	j.added_tokens.push({ ...j.added_tokens.find((t) => t.content === "<|im_end|>") });
	add("<|endoftext|>", { special: false, normalized: false, rstrip: true });
	add("<think>", { special: true, normalized: false, lstrip: true });
	add("hello world", { single_word: false, rstrip: true });
	fs.writeFileSync(outPath, JSON.stringify(j));
}

async function main() {
	const [cmd, ...args] = process.argv.slice(2);
	if (cmd === "gen" && args.length >= 2) {
		process.stdout.write(gen(Number(args[0]), Number(args[1]), args.includes("--invalid")));
		return 0;
	}
	if (cmd === "check" && args.length >= 3) {
		const lossy = args.includes("--lossy");
		return check(args[0], args[1], args.slice(2).filter((a) => a !== "--lossy"), lossy);
	}
	if (cmd === "golden" && args.length >= 2) {
		await golden(args[0], args.slice(1));
		return 0;
	}
	if (cmd === "variant-added" && args.length === 2) {
		variantAdded(args[0], args[1]);
		return 0;
	}
	if (cmd === "encode" && args.length === 1) {
		await encodeAll(args[0]);
		return 0;
	}
	console.error("usage: hf-tokenizer.js gen SEED COUNT [--invalid] | check TOKENIZER INPUT MODE=OURS... [--lossy] |\n" +
		"       encode TOKENIZER | golden TOKENIZER FILE... | variant-added IN OUT");
	return 2;
}

main().then((rc) => { process.exitCode = rc; }, (e) => { console.error(e); process.exitCode = 2; });
