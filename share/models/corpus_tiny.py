"""The training corpus of capy-tiny: text found offline on the training machine plus synthetic conversations.

Pure Python (no torch), deterministic for a seed, so `python3 share/models/corpus_tiny.py --show N` prints
samples anywhere.  What goes in (licenses in share/models/README.md):

- the Python standard library's sources (PSF license), minus its test suites;
- the sources of the transformers package outside transformers/models (Apache-2.0): docstrings and code;
- the Python reference documentation shipped inside it (pydoc_data.topics: the prose of `help()`);
- the license texts under /usr/share/common-licenses (English prose about software);
- synthetic conversations (messages + tools, rendered later with the chat template): arithmetic and string tasks
  with their answers, reasoning in <think> blocks, calls to three toy tools (calculator, list_files, read_file)
  with their results, code requests answered with stdlib functions, Python questions answered from the docs,
  small talk.  The toy tools below are also what capy's end-to-end tests give the model (t/sdk, t5080).
"""

import ast
import hashlib
import json
import random
import re
import sys
import sysconfig
from pathlib import Path

# ---------------------------------------------------------------------------------------------------------------
# The toy tools, in the shape capy-serve hands to the chat template (OpenAI's, whatever the API).
# ---------------------------------------------------------------------------------------------------------------


def tool(name, description, props, required):
    return {"type": "function", "function": {"name": name, "description": description,
                                              "parameters": {"type": "object", "properties": props,
                                                             "required": required}}}


CALCULATOR = tool("calculator", "Evaluate an arithmetic expression and return its value.",
                  {"expression": {"type": "string", "description": "The expression, for example 12 * (3 + 4)"}},
                  ["expression"])
LIST_FILES = tool("list_files", "List the files in a directory.",
                  {"path": {"type": "string", "description": "The directory to list"}}, ["path"])
READ_FILE = tool("read_file", "Read a text file and return its contents.",
                 {"path": {"type": "string", "description": "The file to read"}}, ["path"])
TOOLS = [CALCULATOR, LIST_FILES, READ_FILE]

# Claude Code's own Read tool and system text, as captured from `claude -p --bare --system-prompt TEXT
# --tools Read` (claude-code-read.json): conversations in exactly that form let a real Claude Code session
# drive the model (t/t5080-serve-trained.bats).
_CC = json.loads((Path(__file__).resolve().parent / "claude-code-read.json").read_text(encoding="utf-8"))
CLAUDE_SYSTEM_PREFIX = _CC["system_prefix"]
CLAUDE_READ = {"type": "function", "function": {"name": _CC["tool"]["name"], "description": _CC["tool"]["description"],
                                                 "parameters": _CC["tool"]["input_schema"]}}
CLAUDE_PROMPTS = ["You are capy-tiny.", "You are capy-tiny, a small assistant. Answer briefly.",
                  "You are a helpful assistant.", "Read files when the user asks."]

# ---------------------------------------------------------------------------------------------------------------
# Text found on the machine
# ---------------------------------------------------------------------------------------------------------------


def held_out(key):
    """About 2 % of the documents never reach training: the held-out set of the perplexity measurement."""
    return hashlib.sha256(key.encode()).digest()[0] < 6


def stdlib_sources():
    """[(key, text)] of the standard library's .py files, sorted, without tests, site-packages or pydoc_data."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        parts = set(rel.parts)
        if parts & {"site-packages", "dist-packages", "test", "tests", "idle_test", "pydoc_data", "__pycache__"}:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if 200 <= len(text) <= 400_000:
            out.append(("py:" + str(rel), text))
    return out


def package_sources(pkg, skip=("models",), cap_bytes=12_000_000):
    """[(key, text)] of an installed package's .py files (sorted, sub-packages in skip left out), up to cap_bytes:
    more English (docstrings) and code than the stdlib alone.  Used for transformers (Apache-2.0)."""
    import importlib.util

    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(list(spec.submodule_search_locations)[0])
    out, total = [], 0
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if rel.parts[0] in skip or "__pycache__" in rel.parts:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if 200 <= len(text) <= 400_000 and total + len(text) <= cap_bytes:
            out.append((f"{pkg}:{rel}", text))
            total += len(text)
    return out


def pydoc_topics():
    """[(key, text)]: the reference manual's sections as help() shows them."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return []
    return [("doc:" + k, v.strip() + "\n") for k, v in sorted(topics.items()) if len(v) > 200]


def license_texts():
    root = Path("/usr/share/common-licenses")
    out = []
    if root.is_dir():
        for p in sorted(root.iterdir()):
            if p.is_file() and not p.is_symlink():
                try:
                    out.append(("license:" + p.name, p.read_text(encoding="utf-8")))
                except (UnicodeDecodeError, OSError):
                    pass
    return out


def functions_with_docstrings(sources, limit_lines=30):
    """Small top-level functions of the stdlib with a one-line summary: material for code requests."""
    out = []
    for key, text in sources:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines()
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            n = node.end_lineno - node.lineno + 1
            if not doc or n > limit_lines or node.decorator_list:
                continue
            summary = doc.strip().split("\n")[0].strip().rstrip(".")
            if not 12 <= len(summary) <= 100 or not summary[0].isupper():
                continue
            src = "\n".join(lines[node.lineno - 1:node.end_lineno])
            out.append((key, node.name, summary, src))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Synthetic conversations
# ---------------------------------------------------------------------------------------------------------------

DIRS = ["/home/user/project", "/tmp", "src", "/var/log", "docs", "/home/ana/notes", "tests", "/etc/nginx",
        "/srv/app", "data", "/home/user/Downloads", "build", "scripts", "/opt/capy", "examples"]
FILES = ["main.py", "README.md", "utils.py", "setup.cfg", "data.csv", "notes.txt", "Makefile", "test_app.py",
         "config.json", "server.c", "server.h", "index.html", "style.css", "app.log", "todo.md", "LICENSE",
         "requirements.txt", "run.sh", "model.capy", "parser.py", "report.pdf", "photo.jpg", "Cargo.toml", "go.mod"]
WORDS = ["capybara", "river", "python", "model", "token", "garden", "window", "planet", "coffee", "music",
         "orange", "silver", "kernel", "cache", "expert", "little", "summer", "yellow", "rabbit", "forest",
         "engine", "server", "cloud", "bridge", "pencil", "island", "winter", "dragon", "lemon", "tiger"]
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Goro", "Hana", "Ivan", "Jun", "Kofi", "Lena"]
SYSTEMS = ["You are a helpful assistant.", "You are capy-tiny, a small assistant. Answer briefly.",
           "You are a coding assistant. Use the tools when they help.", "Be concise."]


def arith_expr(rng):
    a, b, c = rng.randint(2, 999), rng.randint(2, 99), rng.randint(2, 50)
    forms = [f"{a} * {b}", f"{a} + {b}", f"{a} - {b}", f"({a} + {b}) * {c}", f"{a} * {b} - {c}",
             f"{a} + {b} + {c}", f"{b} * {c} + {a}", f"{a} * ({b} - {c})", f"{a} ** 2", f"{a} // {c}", f"{a} % {c}"]
    e = rng.choice(forms)
    return e, eval(e, {"__builtins__": {}})  # noqa: S307 - our own digits and operators only


def ask_arith(rng, e):
    return rng.choice([f"What is {e}?", f"Compute {e}.", f"Calculate {e} for me.", f"How much is {e}?",
                       f"Please work out {e}.", f"what's {e}", f"{e} = ?", f"Can you tell me the value of {e}?"])


def calc_call(e):
    return {"type": "function", "function": {"name": "calculator", "arguments": {"expression": e}}}


def tools_with(rng, must):
    """A tool list that holds `must`, sometimes with the others, in a random order."""
    ts = [t for t in TOOLS if t["function"]["name"] in must or rng.random() < 0.5]
    rng.shuffle(ts)
    return ts


def maybe_system(rng, msgs):
    if rng.random() < 0.3:
        msgs.insert(0, {"role": "system", "content": rng.choice(SYSTEMS)})
    return msgs


def conv_calculator(rng, think):
    e, v = arith_expr(rng)
    msgs = [{"role": "user", "content": ask_arith(rng, e)}]
    r1 = rng.choice([f"The user wants {e}. The calculator gives the exact value.",
                     f"I should use the calculator for {e}.", f"Let me evaluate {e} with the calculator."])
    msgs.append({"role": "assistant", "content": "", "reasoning_content": r1 if think else "",
                 "tool_calls": [calc_call(e)]})
    msgs.append({"role": "tool", "content": str(v)})
    r2 = f"The calculator returned {v}." if think else ""
    msgs.append({"role": "assistant", "content": rng.choice([f"{e} = {v}.", f"The answer is {v}.",
                                                              f"{e} is {v}."]), "reasoning_content": r2})
    if rng.random() < 0.25:  # stop after the call: the model learns to end its turn there
        msgs = msgs[:2]
    return maybe_system(rng, msgs), tools_with(rng, {"calculator"})


def conv_two_calcs(rng, think):
    (e1, v1), (e2, v2) = arith_expr(rng), arith_expr(rng)
    msgs = [{"role": "user", "content": f"Compute {e1} and {e2}."},
            {"role": "assistant", "content": "", "reasoning_content": "Two expressions: two calculator calls."
             if think else "", "tool_calls": [calc_call(e1), calc_call(e2)]},
            {"role": "tool", "content": str(v1)}, {"role": "tool", "content": str(v2)},
            {"role": "assistant", "content": f"{e1} = {v1} and {e2} = {v2}.", "reasoning_content": ""}]
    return maybe_system(rng, msgs), tools_with(rng, {"calculator"})


def listing(rng):
    return sorted(rng.sample(FILES, rng.randint(1, 6)))


def conv_list_files(rng, think):
    d = rng.choice(DIRS)
    names = listing(rng)
    ask = rng.choice([f"What files are in {d}?", f"List the files in {d}.", f"Show me what is in {d}.",
                      f"ls {d}", f"Which files does the directory {d} contain?"])
    msgs = [{"role": "user", "content": ask},
            {"role": "assistant", "content": "", "reasoning_content": f"I will list {d}." if think else "",
             "tool_calls": [{"type": "function", "function": {"name": "list_files", "arguments": {"path": d}}}]},
            {"role": "tool", "content": json.dumps(names)}]
    n = len(names)
    ans = f"{d} contains {n} file{'s' if n != 1 else ''}: " + ", ".join(names) + "."
    msgs.append({"role": "assistant", "content": ans, "reasoning_content": ""})
    if rng.random() < 0.4:
        f = rng.choice(names)
        path = f"{d.rstrip('/')}/{f}"
        body = file_body(rng, f)
        msgs += [{"role": "user", "content": rng.choice([f"Show me {f}.", f"What is in {f}?", f"Read {f}."])}]
        msgs += read_turns(path, think, "read_file", "path", body, body)
    if rng.random() < 0.2:
        msgs = msgs[:2]
    return maybe_system(rng, msgs), tools_with(rng, {"list_files", "read_file"})


def read_turns(path, think, tool, arg, result, shown):
    """A file-reading round after the user's ask: the call, the tool's result, the answer quoting it."""
    return [{"role": "assistant", "content": "", "reasoning_content": f"I will read {path}." if think else "",
             "tool_calls": [{"type": "function", "function": {"name": tool, "arguments": {arg: path}}}]},
            {"role": "tool", "content": result},
            {"role": "assistant", "content": f"{path} says:\n\n{shown}", "reasoning_content": ""}]


def file_body(rng, name):
    w = rng.sample(WORDS, 3)
    if name.endswith(".py"):
        return f"def {w[0]}(x):\n    return x * {rng.randint(2, 9)}\n"
    if name.endswith(".json"):
        return json.dumps({w[0]: rng.randint(0, 100), w[1]: w[2]})
    if name.endswith(".md") or name.endswith(".txt"):
        return f"# {w[0].capitalize()}\n\nNotes about the {w[1]} and the {w[2]}.\n"
    return f"{w[0]} {w[1]} {w[2]}\n"


def conv_claude_read(rng, think):
    """Claude Code's Read round: its system text and its Read tool, an absolute path, the line-numbered
    result Claude Code sends back ("1\tline\n2\t..."), the contents in the answer."""
    d = rng.choice([x for x in DIRS if x.startswith("/")])
    f = rng.choice(FILES[:12])
    path = f"{d}/{f}"
    body = file_body(rng, f)
    lines = body.split("\n")
    numbered = "\n".join(f"{i + 1}\t{ln}" for i, ln in enumerate(lines))
    ask = rng.choice([f"Read {path}", f"Read {path} and tell me what it says.", f"What is in {path}?",
                      f"Show me the file {path}.", f"Please read {path}."])
    system = CLAUDE_SYSTEM_PREFIX + "\n" + rng.choice(CLAUDE_PROMPTS)
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": ask}]
    msgs += read_turns(path, think, "Read", "file_path", numbered, body.rstrip())
    if rng.random() < 0.2:
        msgs = msgs[:3]
    return msgs, [CLAUDE_READ]


def conv_plain_arith(rng, think):
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    op = rng.choice(["+", "*", "-"])
    v = eval(f"{a} {op} {b}", {"__builtins__": {}})  # noqa: S307
    msgs = [{"role": "user", "content": ask_arith(rng, f"{a} {op} {b}")},
            {"role": "assistant", "content": f"{a} {op} {b} = {v}.",
             "reasoning_content": f"{a} {op} {b} = {v}." if think else ""}]
    return maybe_system(rng, msgs), None


def conv_string(rng, think):
    w = rng.choice(WORDS)
    kind = rng.randrange(5)
    if kind == 0:
        q, a, r = f"Write the word {w} in capital letters.", w.upper(), f"{w} in capitals is {w.upper()}."
    elif kind == 1:
        q, a, r = f"How many letters are in the word {w}?", f"The word {w} has {len(w)} letters.", \
            " ".join(w) + f": {len(w)} letters."
    elif kind == 2:
        q, a, r = f"Spell {w} letter by letter.", "-".join(w), f"{w} is " + " ".join(w) + "."
    elif kind == 3:
        q, a, r = f"What is the first letter of {w}?", f"The first letter of {w} is {w[0]}.", f"{w} starts with {w[0]}."
    else:
        n = rng.randint(2, 4)
        q, a, r = f"Repeat the word {w} {n} times.", " ".join([w] * n), f"{n} times {w}."
    msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": a, "reasoning_content": r if think else ""}]
    return maybe_system(rng, msgs), (tools_with(rng, set()) if rng.random() < 0.3 else None)


def conv_code(rng, think, funcs):
    key, name, summary, src = rng.choice(funcs)
    lowered = summary[0].lower() + summary[1:]
    q = rng.choice([f"Write a Python function {name} that does this: {lowered}.",
                    f"Show me a Python function to {lowered}.", f"How would I implement {name} in Python?",
                    f"I need Python code: {lowered}."])
    a = f"Here is `{name}`:\n\n```python\n{src}\n```\n\nIt comes from the module `{key[3:-3].replace('/', '.')}`."
    r = f"The user wants a function that does this: {lowered}. The standard library has {name}." if think else ""
    msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": a, "reasoning_content": r}]
    return maybe_system(rng, msgs), (tools_with(rng, set()) if rng.random() < 0.2 else None)


def conv_docs(rng, think, topics):
    key, text = rng.choice(topics)
    topic = key[4:]
    paras = [p.strip() for p in text.split("\n\n") if len(p.strip()) > 80]
    if not paras:
        paras = [text.strip()[:600]]
    q = rng.choice([f"Explain {topic} in Python.", f"What does the Python documentation say about {topic}?",
                    f"Tell me about {topic}.", f"How does {topic} work in Python?"])
    a = "\n\n".join(paras[:rng.randint(1, 2)])[:1200]
    msgs = [{"role": "user", "content": q},
            {"role": "assistant", "content": a, "reasoning_content": f"This is about {topic}." if think else ""}]
    return maybe_system(rng, msgs), None


SMALL_TALK = [
    ("Hello!", "Hello! How can I help you today?"),
    ("Hi", "Hi! What can I do for you?"),
    ("Who are you?", "I am capy-tiny, a small language model trained to test capy. I can do arithmetic with a "
                     "calculator, list and read files, and write a little Python."),
    ("What can you do?", "I can answer short questions, call my tools (a calculator, a file lister and a file "
                         "reader) and show Python code from the standard library."),
    ("Thanks!", "You are welcome!"),
    ("Thank you, that helps.", "Glad it helped."),
    ("Good morning.", "Good morning! What would you like to do?"),
    ("Tell me a joke.", "Why do programmers prefer dark mode? Because light attracts bugs."),
    ("Are you a large model?", "No, I am a very small model. My answers are short and often wrong outside my "
                               "tasks."),
]


def conv_small_talk(rng, think):
    q, a = rng.choice(SMALL_TALK)
    name = rng.choice(NAMES)
    if rng.random() < 0.3:
        q = f"{q} I am {name}."
        a = a.replace("!", f", {name}!", 1) if "!" in a else a
    msgs = [{"role": "user", "content": q},
            {"role": "assistant", "content": a, "reasoning_content": "A greeting: no tool needed." if think else ""}]
    return maybe_system(rng, msgs), (tools_with(rng, set()) if rng.random() < 0.5 else None)


KINDS = [(conv_calculator, 0.22), (conv_two_calcs, 0.04), (conv_list_files, 0.18), (conv_plain_arith, 0.07),
         (conv_string, 0.1), (conv_code, 0.16), (conv_docs, 0.13), (conv_small_talk, 0.1), (conv_claude_read, 0.08)]


def conversations(seed, n, funcs, topics):
    """n conversations: [(messages, tools or None, enable_thinking)]."""
    rng = random.Random(seed)
    fns, weights = zip(*KINDS)
    out = []
    for _ in range(n):
        fn = rng.choices(fns, weights)[0]
        think = rng.random() < 0.7
        if fn is conv_code:
            msgs, tools = fn(rng, think, funcs)
        elif fn is conv_docs:
            msgs, tools = fn(rng, think, topics)
        else:
            msgs, tools = fn(rng, think)
        out.append((msgs, tools, think))
    return out


def text_documents():
    """(train, held) lists of (key, text) from the machine."""
    src = stdlib_sources()
    docs = src + package_sources("transformers") + pydoc_topics() + license_texts()
    train = [d for d in docs if not held_out(d[0])]
    held = [d for d in docs if held_out(d[0])]
    return train, held, src


if __name__ == "__main__":
    n = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "--show" else 3
    train, held, src = text_documents()
    funcs = functions_with_docstrings([d for d in src if not held_out(d[0])])
    topics = [d for d in pydoc_topics() if not held_out(d[0])]
    print(f"{len(train)} training documents ({sum(len(t) for _, t in train) / 1e6:.1f} MB), {len(held)} held out, "
          f"{len(funcs)} functions, {len(topics)} doc topics", file=sys.stderr)
    for msgs, tools, think in conversations(1, n, funcs, topics or [("doc:none", "No documentation here.")]):
        print(json.dumps({"messages": msgs, "tools": [t["function"]["name"] for t in tools or []],
                          "think": think}, ensure_ascii=False))
