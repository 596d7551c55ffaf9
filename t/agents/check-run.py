#!/usr/bin/env python3
"""check-run.py - did an agent CLI's run complete the one-tool-round task?

    check-run.py claude|qwen|opencode|codex OUTPUT MARKER DONE

OUTPUT is what the CLI printed in its JSON mode (claude --output-format stream-json --verbose,
qwen --output-format json, opencode run --format json, codex exec --json). The run passes when
a tool ran and its result carries MARKER (the content of hello.txt: only the tool could have
read it), and the final answer carries DONE (the scripted reply to that result), with no error
reported. Prints what it found; exit 0 on a pass, 1 otherwise.
"""
import json
import sys


def events(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        whole = json.loads(text)
        return whole if isinstance(whole, list) else [whole]
    except ValueError:
        pass
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(c.get("text", c.get("content")) if isinstance(c, dict) else c)
                         for c in content)
    return ""


def check_sdk_messages(evs, marker, done):
    """Claude Code's stream-json and Qwen Code's json: SDK-style user/assistant/result messages."""
    tools = {}
    for e in evs:
        if e.get("type") == "assistant":
            for b in (e.get("message") or {}).get("content") or []:
                if b.get("type") == "tool_use":
                    tools[b.get("id")] = b.get("name")
    ran = None
    for e in evs:
        if e.get("type") != "user":
            continue
        for b in (e.get("message") or {}).get("content") or []:
            if isinstance(b, dict) and b.get("type") == "tool_result" and not b.get("is_error") \
                    and marker in text_of(b.get("content")):
                ran = tools.get(b.get("tool_use_id"), "?")
    results = [e for e in evs if e.get("type") == "result"]
    if ran is None:
        return False, "no tool result holds %s" % marker
    if not results:
        return False, "no result message"
    r = results[-1]
    if r.get("subtype") != "success" or r.get("is_error"):
        return False, "the result is an error: %s" % json.dumps(r)[:300]
    if done not in (r.get("result") or ""):
        return False, "the final answer lacks %s: %r" % (done, (r.get("result") or "")[:200])
    return True, "tool %s ran; the answer has %s" % (ran, done)


def check_opencode(evs, marker, done):
    ran = None
    answer = False
    for e in evs:
        part = e.get("part") or {}
        if e.get("type") == "error":
            return False, "opencode reported an error: %s" % json.dumps(e)[:300]
        if e.get("type") == "tool_use":
            st = part.get("state") or {}
            if st.get("status") == "completed" and marker in str(st.get("output")):
                ran = part.get("tool")
        if e.get("type") == "text" and done in (part.get("text") or ""):
            answer = ran is not None
    if ran is None:
        return False, "no completed tool holds %s" % marker
    if not answer:
        return False, "no text after the tool has %s" % done
    return True, "tool %s ran; the answer has %s" % (ran, done)


def check_codex(evs, marker, done):
    ran = None
    answer = False
    for e in evs:
        kind = e.get("type")
        if kind in ("turn.failed", "error"):
            return False, "codex reported %s: %s" % (kind, json.dumps(e)[:300])
        item = e.get("item") or {}
        if kind != "item.completed":
            continue
        if item.get("type") == "agent_message" and done in (item.get("text") or ""):
            answer = ran is not None
        elif item.get("type") not in ("agent_message", "reasoning", "error") \
                and item.get("status") == "completed" and marker in json.dumps(item):
            ran = item.get("type")
    if ran is None:
        return False, "no completed tool item holds %s" % marker
    if not answer:
        return False, "no agent message after the tool has %s" % done
    if not evs or evs[-1].get("type") != "turn.completed":
        return False, "the last event is not turn.completed"
    return True, "a %s item ran; the answer has %s" % (ran, done)


CHECKS = {"claude": check_sdk_messages, "qwen": check_sdk_messages,
          "opencode": check_opencode, "codex": check_codex}


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in CHECKS:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    kind, path, marker, done = sys.argv[1:]
    evs = [e for e in events(path) if isinstance(e, dict)]
    if not evs:
        print("no JSON events in the output")
        return 1
    ok, why = CHECKS[kind](evs, marker, done)
    print(why)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
