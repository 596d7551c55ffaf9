#!/usr/bin/env node
// tokenizer-hf.js - encode and decode throughput of the Hugging Face tokenizers library (Rust,
// through @anush008/tokenizers from t/ext) on the same text as tokenizer-bench, for docs/perf.md.
//
//   node bench/tokenizer-hf.js TOKENIZER.json TEXT [SECONDS]
//
// encode() of one string runs on one libuv worker thread; pin the process with taskset for one
// core. Output lines match tokenizer-bench's.
"use strict";
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require(path.join(__dirname, "../t/ext/node_modules/@anush008/tokenizers"));

async function main() {
	const [tokPath, textPath, secArg] = process.argv.slice(2);
	const seconds = Number(secArg || 3);
	const text = fs.readFileSync(textPath, "utf8");
	const bytes = Buffer.byteLength(text, "utf8");
	let t0 = process.hrtime.bigint();
	const tok = Tokenizer.fromFile(tokPath);
	const now = () => Number(process.hrtime.bigint() - t0) / 1e9;
	console.log(`load      ${now().toFixed(3)} s`);
	t0 = process.hrtime.bigint();
	let e = await tok.encode(text, null, { addSpecialTokens: false });
	console.log(`first     ${(bytes / now() / 1e6).toFixed(2)} MB/s  (one encode right after loading)`);
	let rounds = 0, t;
	t0 = process.hrtime.bigint();
	do {
		e = await tok.encode(text, null, { addSpecialTokens: false });
		rounds++;
	} while ((t = now()) < seconds);
	const ids = e.getIds();
	console.log(`encode    ${(bytes * rounds / t / 1e6).toFixed(2)} MB/s  ${(ids.length * rounds / t).toFixed(0)} tokens/s  (${bytes} bytes -> ${ids.length} tokens, ${rounds} rounds)`);
	rounds = 0;
	t0 = process.hrtime.bigint();
	let out;
	do {
		out = await tok.decode(ids, false);
		rounds++;
	} while ((t = now()) < seconds / 2);
	console.log(`decode    ${(Buffer.byteLength(out, "utf8") * rounds / t / 1e6).toFixed(2)} MB/s  ${(ids.length * rounds / t).toFixed(0)} tokens/s`);
}

main().catch((e) => { console.error(e); process.exitCode = 1; });
