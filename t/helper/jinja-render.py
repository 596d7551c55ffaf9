#!/usr/bin/env python3
"""jinja-render.py - the reference renderer: Python jinja2 configured as transformers does.

    jinja-render.py render TEMPLATE CASE.json [TOKENIZER_CONFIG.json]
    jinja-render.py render-template TEMPLATE [VARS.json]

Same arguments and case format as `capy-test-tool render`, so the shell tests can compare the
two byte for byte. The environment mirrors transformers' chat_template_utils: an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls, transformers'
tojson (plain json.dumps), raise_exception and strftime_now; the context is messages, tools,
documents=None, add_generation_prompt, the special tokens, then the kwargs. Unless the case sets
keep_string_arguments, assistant tool-call arguments given as strings are json.loads'ed first
(null or "" become {}), as vLLM does before rendering.
"""
import json
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


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    env = environment()
    try:
        template = env.from_string(read_template(argv[2]))
        if argv[1] == "render":
            case = load(argv[3])
            messages = case["messages"]
            if not case.get("keep_string_arguments", False):
                messages = parse_arguments(messages)
            kwargs = special_tokens(load(argv[4])) if len(argv) > 4 else {}
            kwargs.update(case.get("kwargs") or {})
            out = template.render(messages=messages, tools=case.get("tools"), documents=None,
                                  add_generation_prompt=case.get("add_generation_prompt", False),
                                  **kwargs)
        elif argv[1] == "render-template":
            out = template.render(**(load(argv[3]) if len(argv) > 3 else {}))
        else:
            sys.stderr.write(__doc__)
            return 2
    except Exception as e:  # any failure of the template, reported in one line
        sys.stderr.write(f"jinja-render: {type(e).__name__}: {e}\n")
        return 1
    sys.stdout.buffer.write(out.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
