#!/usr/bin/env python3
"""serve-check.py - the capy-serve tests' SSE checker and raw-socket clients
(standard library only; used through t/helper/serve.bash).

    serve-check.py sse API FILE          check an SSE stream of API (chat, completions, responses,
                                         messages); print its summary as JSON; exit 1 with the
                                         reason when it is malformed
    serve-check.py hold PORT SECONDS     open a connection, send nothing, report when the server
                                         closes it (or that it did not) - slow clients
    serve-check.py partial PORT SECONDS  send half a request's headers and wait the same way
    serve-check.py slowbody PORT SECONDS send the headers and 10 of 100 body bytes, and wait
    serve-check.py halfclose PORT BODY   send a whole POST /v1/chat/completions, shut the write
                                         side, print what comes back (status line) within 10 s
    serve-check.py occupy PORT N SECONDS open N connections, print "open", keep them SECONDS
    serve-check.py healthwatch PORT SECS GET /health every 10 ms until the connection is refused
                                         (or SECS pass); print each status when it changes, a
                                         line each, then "refused" (or "open")
"""
import json
import socket
import sys
import time


def fail(msg):
    sys.stderr.write("serve-check: %s\n" % msg)
    sys.exit(1)


def parse_events(raw):
    """SSE events as (event_name or None, data_text) from bytes; every line must be UTF-8."""
    if not raw:
        fail("empty stream")
    if not raw.endswith(b"\n\n"):
        fail("the stream does not end with a blank line: %r" % raw[-80:])
    events = []
    for n, block in enumerate(raw[:-2].split(b"\n\n")):
        name, data = None, []
        for line in block.split(b"\n"):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                fail("event %d: a line is not valid UTF-8 (%s): %r" % (n, e, line[:200]))
            if text.startswith("event: "):
                if name is not None:
                    fail("event %d: two event: lines" % n)
                name = text[7:]
            elif text.startswith("data: "):
                data.append(text[6:])
            elif text.startswith(":") or text == "":
                continue
            else:
                fail("event %d: unexpected line %r" % (n, text[:200]))
        if not data:
            fail("event %d has no data line: %r" % (n, block[:200]))
        events.append((name, "\n".join(data)))
    return events


def json_of(n, data):
    try:
        return json.loads(data)
    except ValueError as e:
        fail("event %d: data is not JSON (%s): %r" % (n, e, data[:200]))


def sse_chat(events, completions):
    out = {"events": [], "content": "", "reasoning": "", "tool_calls": [], "finish": None,
           "usage": None, "content_deltas": 0, "args_deltas": 0, "logprobs": [], "error": None,
           "role": None, "ids": set()}
    if events[-1][1] != "[DONE]":
        fail("the stream does not end with data: [DONE]")
    for n, (name, data) in enumerate(events[:-1]):
        if name is not None:
            fail("event %d: chat streams have no event: lines" % n)
        if data == "[DONE]":
            fail("event %d: [DONE] before the end" % n)
        c = json_of(n, data)
        if "error" in c:
            out["error"] = c["error"]
            continue
        want = "text_completion" if completions else "chat.completion.chunk"
        if c.get("object") != want:
            fail("event %d: object is %r, not %s" % (n, c.get("object"), want))
        out["ids"].add(c.get("id"))
        if c.get("usage"):
            out["usage"] = c["usage"]
        for ch in c.get("choices", []):
            if ch.get("finish_reason"):
                if out["finish"]:
                    fail("event %d: a second finish_reason" % n)
                out["finish"] = ch["finish_reason"]
            lp = ch.get("logprobs")
            if completions:
                out["content"] += ch.get("text", "")
                if lp:
                    out["logprobs"].append(lp)
                continue
            if lp and lp.get("content"):
                out["logprobs"] += lp["content"]
            d = ch.get("delta", {})
            if "role" in d:
                if n != 0:
                    fail("event %d: role after the first chunk" % n)
                out["role"] = d["role"]
            if d.get("content"):
                out["content"] += d["content"]
                out["content_deltas"] += 1
            if d.get("reasoning_content"):
                out["reasoning"] += d["reasoning_content"]
            for tc in d.get("tool_calls") or []:
                i = tc["index"]
                while len(out["tool_calls"]) <= i:
                    out["tool_calls"].append({"id": None, "name": None, "arguments": ""})
                t = out["tool_calls"][i]
                if tc.get("id"):
                    t["id"] = tc["id"]
                fn = tc.get("function", {})
                if fn.get("name"):
                    t["name"] = fn["name"]
                if fn.get("arguments"):
                    t["arguments"] += fn["arguments"]
                    out["args_deltas"] += 1
    if len(out["ids"]) > 1:
        fail("chunks of one stream carry different ids: %s" % sorted(out["ids"]))
    out["ids"] = sorted(i for i in out["ids"] if i)
    out["events"] = len(events)
    return out


def sse_responses(events):
    out = {"events": [], "content": "", "reasoning": "", "tool_calls": [], "response": None,
           "args_deltas": 0, "content_deltas": 0}
    calls = {}
    for n, (name, data) in enumerate(events):
        e = json_of(n, data)
        if name is None:
            fail("event %d: no event: line" % n)
        if e.get("type") != name:
            fail("event %d: event: %s but type %r" % (n, name, e.get("type")))
        if e.get("sequence_number") != n:
            fail("event %d: sequence_number %r" % (n, e.get("sequence_number")))
        out["events"].append(name)
        if name == "response.output_text.delta":
            out["content"] += e["delta"]
            out["content_deltas"] += 1
        elif name in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            out["reasoning"] += e["delta"]
        elif name == "response.output_item.added" and e["item"]["type"] == "function_call":
            calls[e["output_index"]] = {"name": e["item"]["name"], "call_id": e["item"]["call_id"],
                                        "arguments": ""}
            out["tool_calls"].append(calls[e["output_index"]])
        elif name == "response.function_call_arguments.delta":
            calls[e["output_index"]]["arguments"] += e["delta"]
            out["args_deltas"] += 1
        if name in ("response.completed", "response.incomplete", "response.failed"):
            if n != len(events) - 1:
                fail("event %d: %s before the end" % (n, name))
            out["response"] = e["response"]
    if events[0][0] != "response.created":
        fail("the stream does not start with response.created")
    if out["response"] is None:
        fail("the stream does not end with response.completed / incomplete / failed")
    return out


def sse_messages(events):
    out = {"events": [], "content": "", "reasoning": "", "tool_calls": [], "stop_reason": None,
           "stop_sequence": None, "usage": {}, "start_usage": None, "args_deltas": 0,
           "content_deltas": 0, "blocks": [], "error": None}
    blocks = {}
    for n, (name, data) in enumerate(events):
        e = json_of(n, data)
        if name is None:
            fail("event %d: no event: line" % n)
        if e.get("type") != name:
            fail("event %d: event: %s but type %r" % (n, name, e.get("type")))
        out["events"].append(name)
        if name == "message_start":
            if n != 0:
                fail("event %d: message_start not first" % n)
            out["start_usage"] = e["message"]["usage"]
        elif name == "content_block_start":
            b = dict(e["content_block"])
            if b["type"] == "tool_use":
                b["arguments"] = ""
                out["tool_calls"].append(b)
            blocks[e["index"]] = b
            out["blocks"].append(b["type"])
        elif name == "content_block_delta":
            d = e["delta"]
            b = blocks[e["index"]]
            if d["type"] == "text_delta":
                out["content"] += d["text"]
                out["content_deltas"] += 1
            elif d["type"] == "thinking_delta":
                out["reasoning"] += d["thinking"]
            elif d["type"] == "input_json_delta":
                b["arguments"] += d["partial_json"]
                out["args_deltas"] += 1
        elif name == "message_delta":
            out["stop_reason"] = e["delta"].get("stop_reason")
            out["stop_sequence"] = e["delta"].get("stop_sequence")
            out["usage"] = e.get("usage", {})
        elif name == "error":
            out["error"] = e["error"]
    if out["error"] is None:
        if out["events"][0] != "message_start" or out["events"][-1] != "message_stop":
            fail("the stream does not run from message_start to message_stop: %s" % out["events"])
    return out


def cmd_sse(api, path):
    with open(path, "rb") as f:
        raw = f.read()
    events = parse_events(raw)
    if api in ("chat", "completions"):
        out = sse_chat(events, api == "completions")
    elif api == "responses":
        out = sse_responses(events)
    elif api == "messages":
        out = sse_messages(events)
    else:
        fail("unknown API %r" % api)
    sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")


def connect(port):
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
    return s


def wait_closed(s, seconds):
    """Seconds until the server closes the connection (EOF or reset), or None."""
    t0 = time.monotonic()
    s.settimeout(0.05)
    got = b""
    while time.monotonic() - t0 < seconds:
        try:
            b = s.recv(4096)
        except socket.timeout:
            continue
        except ConnectionError:
            return time.monotonic() - t0, got
        if not b:
            return time.monotonic() - t0, got
        got += b
    return None, got


def cmd_hold(port, seconds, first=b""):
    s = connect(port)
    if first:
        s.sendall(first)
    t, got = wait_closed(s, float(seconds))
    if t is None:
        print("open after %s s" % seconds)
    else:
        print("closed after %.1f s%s" % (t, (": " + got.split(b"\r\n")[0].decode("latin-1")) if got else ""))


def cmd_halfclose(port, body):
    s = connect(port)
    data = body.encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    s.shutdown(socket.SHUT_WR)
    t, got = wait_closed(s, 10)
    if t is None:
        print("no close within 10 s")
    else:
        print(got.split(b"\r\n")[0].decode("latin-1") if got else "closed without an answer")


def cmd_occupy(port, n, seconds):
    socks = [connect(port) for _ in range(int(n))]
    # let the server see them (its connection callback) before the caller goes on
    time.sleep(0.2)
    print("open", flush=True)
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        time.sleep(0.05)
    for s in socks:
        s.close()


def cmd_healthwatch(port, seconds):
    end = time.monotonic() + float(seconds)
    last = None
    while time.monotonic() < end:
        try:
            s = socket.create_connection(("127.0.0.1", int(port)), timeout=2)
        except ConnectionError:
            print("refused", flush=True)
            return
        try:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            got = b""
            while True:
                b = s.recv(4096)
                if not b:
                    break
                got += b
            status = got.split(b" ")[1].decode() if got.startswith(b"HTTP/1.1 ") else "none"
        except (ConnectionError, socket.timeout, IndexError):
            status = "none"
        finally:
            s.close()
        if status != last:
            print(status, flush=True)
            last = status
        time.sleep(0.01)
    print("open", flush=True)


def main(argv):
    if len(argv) < 2:
        fail(__doc__)
    c = argv[1]
    if c == "sse" and len(argv) == 4:
        cmd_sse(argv[2], argv[3])
    elif c == "hold" and len(argv) == 4:
        cmd_hold(argv[2], argv[3])
    elif c == "partial" and len(argv) == 4:
        cmd_hold(argv[2], argv[3], b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
    elif c == "slowbody" and len(argv) == 4:
        cmd_hold(argv[2], argv[3], b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"messages")
    elif c == "halfclose" and len(argv) == 4:
        cmd_halfclose(argv[2], argv[3])
    elif c == "healthwatch" and len(argv) == 4:
        cmd_healthwatch(argv[2], argv[3])
    elif c == "occupy" and len(argv) == 5:
        cmd_occupy(argv[2], argv[3], argv[4])
    else:
        fail("bad arguments: %s" % " ".join(argv[1:]))


if __name__ == "__main__":
    main(sys.argv)
