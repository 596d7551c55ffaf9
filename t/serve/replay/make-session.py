#!/usr/bin/env python3
"""make-session.py - writes session.jsonl: a replayed coding-agent session for capy-serve's
prefix-cache test. Three conversations with the same agent system prompt and tools run
interleaved (A1 B1 C1 A2 B2 C2 ...); each turn sends the whole conversation so far, as agents
do: the previous assistant turn (a tool call, with a short reasoning text) and its tool result
(a piece of a source file) are appended, so consecutive prompts of one conversation share
about 90 % of their tokens. Deterministic: the same file every run.

    python3 t/serve/replay/make-session.py > t/serve/replay/session.jsonl
"""
import json
import random

rng = random.Random(20261201)

WORDS = ("the engine reads a page of tokens and writes the state back before the next step "
         "while the scheduler keeps every request in order and the cache holds what was seen "
         "so that a later turn can start where the last one ended").split()


def prose(n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def code(n_lines, name):
    out = []
    for i in range(n_lines):
        v = rng.randrange(1000)
        out.append(f"static int {name}_{i}(int x) {{ return x * {v} + {i}; }} /* {prose(6)} */")
    return "\n".join(out)


SYSTEM = ("You are a coding agent working in a C repository. Read files before you change them, "
          "keep changes small, run the tests, and explain what you did. " + prose(220))
TOOLS = [
    {"type": "function", "function": {"name": "read", "description": "Read a file of the repository.",
                                      "parameters": {"type": "object", "properties": {
                                          "path": {"type": "string", "description": "the file"}},
                                          "required": ["path"]}}},
    {"type": "function", "function": {"name": "grep", "description": "Search the repository for a pattern.",
                                      "parameters": {"type": "object", "properties": {
                                          "pattern": {"type": "string"}, "dir": {"type": "string"}},
                                          "required": ["pattern"]}}},
    {"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                      "parameters": {"type": "object", "properties": {
                                          "command": {"type": "string"}}, "required": ["command"]}}},
]
TASKS = ["Find where pages are released and explain the reference counting.",
         "Why does the scheduler cut prompts into pieces? Show me the code.",
         "Add a comment to the prefix cache lookup explaining the limit argument."]
TURNS = 8


def conversation(task, k):
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    turns = []
    for t in range(TURNS):
        turns.append(list(msgs))
        call_id = f"call_{k}_{t}"
        name = ["read", "grep", "bash"][t % 3]
        args = {"read": {"path": f"libcore/engine/file{t}.c"}, "grep": {"pattern": f"page_{t}", "dir": "libcore"},
                "bash": {"command": f"make -j2 test-{t}"}}[name]
        msgs.append({"role": "assistant", "content": f"Let me look at step {t}. " + prose(12),
                     "tool_calls": [{"id": call_id, "type": "function",
                                     "function": {"name": name, "arguments": json.dumps(args)}}]})
        msgs.append({"role": "tool", "tool_call_id": call_id, "content": code(3, f"f{k}{t}")})
    return turns


convs = [conversation(task, k) for k, task in enumerate(TASKS)]
for t in range(TURNS):
    for k, c in enumerate(convs):
        body = {"model": "replay", "messages": c[t], "tools": TOOLS, "max_tokens": 16, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        print(json.dumps({"conversation": "ABC"[k], "turn": t + 1, "body": body}))
