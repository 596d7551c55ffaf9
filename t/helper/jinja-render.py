#!/usr/bin/env python3
"""jinja-render.py - the reference renderer: Python jinja2 configured as transformers does.

    jinja-render.py render TEMPLATE CASE.json [TOKENIZER_CONFIG.json]
    jinja-render.py render-template TEMPLATE [VARS.json]
    jinja-render.py batch JOBS OUTDIR     (many renders in one process, for the tests)

Same arguments and case format as `capy-test-tool render`, so the shell tests can compare the
two byte for byte. The environment mirrors transformers' chat_template_utils: an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls, transformers'
tojson (plain json.dumps), raise_exception and strftime_now; the context is messages, tools,
documents=None, add_generation_prompt, the special tokens, then the kwargs. Unless the case sets
keep_string_arguments, assistant tool-call arguments given as strings are json.loads'ed first
(null or "" become {}), as vLLM does before rendering.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: transformers' AssistantTracker, rendering only."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
           "mask_token"]


def token_text(v):
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def special_tokens(config):
    out = {}
    for name in SPECIAL:
        tok = token_text(config.get(name))
        if tok is not None:
            out[name] = tok
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list) and extra:
        out["additional_special_tokens"] = [t for t in map(token_text, extra) if t is not None]
    return out


def parse_arguments(messages):
    """vLLM's chat_utils: json.loads string arguments of assistant tool calls."""
    out = []
    for m in messages:
        if (isinstance(m, dict) and m.get("role") == "assistant"
                and isinstance(m.get("tool_calls"), list)):
            m = dict(m)
            calls = []
            for call in m["tool_calls"]:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    args = fn.get("arguments")
                    if not args:
                        args = {}
                    elif isinstance(args, str):
                        args = json.loads(args)
                    fn = dict(fn, arguments=args)
                    call = dict(call, function=fn)
                calls.append(call)
            m["tool_calls"] = calls
        out.append(m)
    return out


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_template(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def run(args):
    """Render one job; returns (exit status, output bytes, error text)."""
    if len(args) < 2 or args[0] not in ("render", "render-template"):
        return 2, b"", __doc__
    env = environment()
    try:
        template = env.from_string(read_template(args[1]))
        if args[0] == "render":
            case = load(args[2])
            messages = case["messages"]
            if not case.get("keep_string_arguments", False):
                messages = parse_arguments(messages)
            kwargs = special_tokens(load(args[3])) if len(args) > 3 else {}
            kwargs.update(case.get("kwargs") or {})
            out = template.render(messages=messages, tools=case.get("tools"), documents=None,
                                  add_generation_prompt=case.get("add_generation_prompt", False),
                                  **kwargs)
        else:
            out = template.render(**(load(args[2]) if len(args) > 2 else {}))
    except Exception as e:  # any failure of the template, reported in one line
        return 1, b"", f"jinja-render: {type(e).__name__}: {e}\n"
    return 0, out.encode("utf-8"), ""


def batch(jobs, outdir):
    """One job per line, "NAME<TAB>ARG<TAB>ARG...": writes NAME.py.out, .py.err and .py.rc."""
    with open(jobs, encoding="utf-8") as f:
        for line in f:
            name, *args = line.rstrip("\n").split("\t")
            rc, out, err = run(args)
            base = os.path.join(outdir, name)
            with open(base + ".py.out", "wb") as o:
                o.write(out)
            with open(base + ".py.err", "w", encoding="utf-8") as o:
                o.write(err)
            with open(base + ".py.rc", "w", encoding="utf-8") as o:
                o.write(f"{rc}\n")
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "batch":
        return batch(argv[2], argv[3])
    rc, out, err = run(argv[1:])
    sys.stderr.write(err)
    sys.stdout.buffer.write(out)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
