#!/usr/bin/env python3
"""fake-llm-server.py - a scripted stand-in for capy-serve, for recording what API clients send.

    fake-llm-server.py [--port N] [--port-file FILE] [--capture-dir DIR] [--script FILE]
                       [--model NAME]... [--api-key KEY] [--max-seconds S] [--max-requests N]
                       [--omit-event TYPE]... [--no-usage]

Serves on 127.0.0.1 (HTTP/1.1, keep-alive):
    POST /v1/chat/completions      OpenAI chat completions, JSON or SSE (stream_options.include_usage)
    POST /v1/responses             OpenAI Responses, JSON or SSE events
    POST /v1/messages[?beta=true]  Anthropic messages, JSON or SSE events
    POST /v1/messages/count_tokens
    GET  /v1/models, /health
The paths also answer without the /v1 prefix. Anything else is a 404 in the OpenAI error shape.

Every request is written to DIR/NNN_METHOD_PATH.json (NNN from 001, PATH without the query,
slashes as underscores) as {"method", "path", "headers", "body"}: the body parsed as JSON where it
is JSON, else a string; credential headers are replaced by "<redacted>".

The model's side comes from a JSON script, the one the scripted test engine of capy-serve follows:
    {"rules": [{"when_last_user_contains": "SUBSTRING", "reply": "RAW OUTPUT"}, ...],
     "default": "RAW OUTPUT"}
The first rule whose substring occurs in the last user turn wins, else "default" (no script:
"Hello from fake."). The last user turn is what follows the last assistant turn of the request,
user text and tool results, each tool result written as the Qwen template writes it,
"<tool_response>\\n" + its text + "\\n</tool_response>", joined by newlines; system and developer
messages are left out. A reply is raw Qwen output: optional reasoning ending in </think>, text,
then tool calls in the XML form of share/chat_templates/qwen3_5.jinja
    <tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>
(or the hermes form <tool_call>{"name": ..., "arguments": {...}}</tool_call>). A value is kept as
a string unless the request's schema for that parameter allows no string, then it is read as
JSON. Each API gets the reply in its own shape: reasoning_content / thinking blocks / reasoning
items, text, and tool calls (function calls; a call of a Responses custom tool becomes a
custom_tool_call item whose input is the call's one parameter value).

With --model (repeatable; default qwen3-fake) only those models are served: another is a 404.
With --api-key a request without that key (Authorization: Bearer, x-api-key or api-key) is a
401. A body that is not a JSON object or lacks what the endpoint needs is a 400. Errors come in
each API's own error shape.

--omit-event TYPE (repeatable) leaves SSE events of that type out and --no-usage leaves usage out,
to find what a client needs to see.

The server exits by itself after --max-seconds (default 120) or --max-requests requests.
Exit status: 0 after a time or request limit, 2 on bad usage.
"""
import argparse
import base64
import gzip
import http.server
import itertools
import json
import os
import re
import sys
import threading
import time
import zlib

OPTIONS = {"omit_events": set(), "no_usage": False}
REDACT = {"authorization", "x-api-key", "api-key", "proxy-authorization", "cookie", "x-goog-api-key"}
CREATED = 1767225600


def log(msg):
    print("fake-llm-server: " + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The conversation: the last user turn and the tools, whatever the API


def parts_text(content):
    """The text of a message content: a string, or a list of parts with text in them."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    out = []
    if isinstance(content, list):
        for p in content:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, dict):
                if isinstance(p.get("text"), str):
                    out.append(p["text"])
                elif p.get("type") == "tool_result":
                    out.append(parts_text(p.get("content")))
    return "\n".join(out)


def tool_response(text):
    return "<tool_response>\n" + text + "\n</tool_response>"


def last_user_chat(body):
    tail = []
    for m in reversed(body.get("messages") or []):
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == "assistant":
            break
        if role == "tool":
            tail.append(tool_response(parts_text(m.get("content"))))
        elif role == "user":
            tail.append(parts_text(m.get("content")))
    return "\n".join(reversed(tail))


ASSISTANT_ITEMS = {"function_call", "custom_tool_call", "local_shell_call", "reasoning",
                   "web_search_call", "mcp_call", "computer_call"}


def last_user_responses(body):
    inp = body.get("input")
    if isinstance(inp, str):
        return inp
    tail = []
    for it in reversed(inp or []):
        if not isinstance(it, dict):
            continue
        kind = it.get("type", "message")
        role = it.get("role")
        if kind in ASSISTANT_ITEMS or (kind == "message" and role == "assistant"):
            break
        if kind.endswith("_output"):
            out = it.get("output")
            if isinstance(out, dict):  # local_shell / custom outputs may be objects
                out = json.dumps(out)
            tail.append(tool_response(parts_text(out)))
        elif kind == "message" and role == "user":
            tail.append(parts_text(it.get("content")))
    return "\n".join(reversed(tail))


def last_user_anthropic(body):
    tail = []
    for m in reversed(body.get("messages") or []):
        if not isinstance(m, dict):
            continue
        if m.get("role") == "assistant":
            break
        c = m.get("content")
        if isinstance(c, str):
            tail.append(c)
            continue
        texts = []
        for b in c if isinstance(c, list) else []:
            if not isinstance(b, dict):
                continue
            if b.get("type") == "tool_result":
                texts.append(tool_response(parts_text(b.get("content"))))
            elif b.get("type") == "text":
                texts.append(b.get("text", ""))
        tail.append("\n".join(texts))
    return "\n".join(reversed(tail))


def tool_table(api, body):
    """name -> (kind, parameters schema) for the request's tools. kind: function or custom."""
    table = {}
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if api == "chat":
            f = t.get("function") or {}
            if f.get("name"):
                table[f["name"]] = ("function", f.get("parameters") or {})
        elif api == "responses":
            kind = t.get("type")
            if kind in ("function", "custom") and t.get("name"):
                table[t["name"]] = (kind, t.get("parameters") or {})
            elif kind == "local_shell":
                table["local_shell"] = ("local_shell", {})
        elif t.get("name"):
            table[t["name"]] = ("function", t.get("input_schema") or {})
    return table


def schema_types(s):
    if not isinstance(s, dict):
        return set()
    t = s.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return set(x for x in t if isinstance(x, str))
    out = set()
    for k in ("anyOf", "oneOf"):
        for sub in s.get(k) or []:
            out |= schema_types(sub)
    return out


# ---------------------------------------------------------------------------------------------
# The model's reply: raw Qwen output into reasoning, text and calls

CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
FUNC_RE = re.compile(r"<function=([^>\s]+)>(.*?)</function>", re.S)
PARAM_RE = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.S)


def typed_value(value, pschema):
    types = schema_types(pschema)
    if not types or "string" in types:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def parse_reply(raw, tools):
    reasoning = ""
    content = raw
    if "</think>" in content:
        reasoning, content = content.split("</think>", 1)
        reasoning = reasoning.split("<think>")[-1].strip()
    calls = []
    for m in CALL_RE.finditer(content):
        inner = m.group(1)
        f = FUNC_RE.search(inner)
        if f:
            name = f.group(1)
            props = (tools.get(name, ("function", {}))[1] or {}).get("properties") or {}
            args = {}
            for p in PARAM_RE.finditer(f.group(2)):
                args[p.group(1)] = typed_value(p.group(2), props.get(p.group(1)))
        else:
            try:
                obj = json.loads(inner)
            except ValueError:
                continue
            name = obj.get("name")
            args = obj.get("arguments", obj.get("parameters")) or {}
            if isinstance(args, str):
                try:
                    args = json.loads(args or "{}")
                except ValueError:
                    continue
        calls.append({"name": name, "args": args, "kind": tools.get(name, ("function",))[0]})
    text = CALL_RE.sub("", content).strip()
    return {"reasoning": reasoning, "text": text, "calls": calls}


def pieces(s, n=8):
    """A string cut into stream deltas of n characters (one empty piece for an empty string)."""
    return [s[i:i + n] for i in range(0, len(s), n)] or [""]


# ---------------------------------------------------------------------------------------------
# Per-API response builders: each returns (json_object) or a list of (event, data) for SSE


class Ids:
    counter = itertools.count(1)

    def __init__(self):
        self.n = next(Ids.counter)

    def __call__(self, prefix, i=0):
        return "%s_fake%d%s" % (prefix, self.n, "_%d" % i if i else "")


def usage_numbers(body, reply):
    prompt = max(1, len(json.dumps(body)) // 4)
    reasoning = len(reply["reasoning"]) // 4
    completion = 1 + (len(reply["text"]) + len(json.dumps([c["args"] for c in reply["calls"]]))) // 4 + reasoning
    return prompt, completion, reasoning


def chat_usage(body, reply):
    if OPTIONS["no_usage"]:
        return None
    p, c, r = usage_numbers(body, reply)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": r}}


def chat_json(body, reply, ids):
    msg = {"role": "assistant", "content": reply["text"] if reply["text"] or not reply["calls"] else None}
    if reply["reasoning"]:
        msg["reasoning_content"] = reply["reasoning"]
    if reply["calls"]:
        msg["tool_calls"] = [{"id": ids("call", i), "type": "function",
                              "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
                             for i, c in enumerate(reply["calls"])]
    return {"id": ids("chatcmpl"), "object": "chat.completion", "created": CREATED,
            "model": body.get("model"), "system_fingerprint": None,
            "choices": [{"index": 0, "message": msg, "logprobs": None,
                         "finish_reason": "tool_calls" if reply["calls"] else "stop"}],
            "usage": chat_usage(body, reply)}


def chat_stream(body, reply, ids):
    head = {"id": ids("chatcmpl"), "object": "chat.completion.chunk", "created": CREATED,
            "model": body.get("model"), "system_fingerprint": None}

    def chunk(delta, finish=None):
        return (None, dict(head, choices=[{"index": 0, "delta": delta, "logprobs": None,
                                           "finish_reason": finish}]))

    out = [chunk({"role": "assistant", "content": ""})]
    if reply["reasoning"]:
        out += [chunk({"reasoning_content": p}) for p in pieces(reply["reasoning"])]
    if reply["text"]:
        out += [chunk({"content": p}) for p in pieces(reply["text"])]
    for i, c in enumerate(reply["calls"]):
        out.append(chunk({"tool_calls": [{"index": i, "id": ids("call", i), "type": "function",
                                          "function": {"name": c["name"], "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
                for p in pieces(json.dumps(c["args"]), 12)]
    out.append(chunk({}, "tool_calls" if reply["calls"] else "stop"))
    if (body.get("stream_options") or {}).get("include_usage") and not OPTIONS["no_usage"]:
        out.append((None, dict(head, choices=[], usage=chat_usage(body, reply))))
    out.append((None, "[DONE]"))
    return out


def responses_items(reply, ids):
    items = []
    if reply["reasoning"]:
        items.append({"type": "reasoning", "id": ids("rs"), "summary": [],
                      "content": [{"type": "reasoning_text", "text": reply["reasoning"]}]})
    if reply["text"]:
        items.append({"type": "message", "id": ids("msg"), "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": reply["text"], "annotations": [],
                                   "logprobs": []}]})
    for i, c in enumerate(reply["calls"]):
        if c["kind"] == "custom":
            args = c["args"]
            text = next(iter(args.values())) if len(args) == 1 else json.dumps(args)
            items.append({"type": "custom_tool_call", "id": ids("ctc", i), "call_id": ids("call", i),
                          "name": c["name"], "input": text if isinstance(text, str) else json.dumps(text),
                          "status": "completed"})
        elif c["kind"] == "local_shell":
            cmd = c["args"].get("command", [])
            items.append({"type": "local_shell_call", "id": ids("lsh", i), "call_id": ids("call", i),
                          "status": "completed",
                          "action": {"type": "exec", "command": cmd if isinstance(cmd, list) else ["bash", "-lc", cmd],
                                     "env": {}, "working_directory": c["args"].get("workdir"),
                                     "timeout_ms": None, "user": None}})
        else:
            items.append({"type": "function_call", "id": ids("fc", i), "call_id": ids("call", i),
                          "name": c["name"], "arguments": json.dumps(c["args"]), "status": "completed"})
    return items


def responses_object(body, reply, ids, status, output):
    p, c, r = usage_numbers(body, reply)
    usage = None
    if status == "completed" and not OPTIONS["no_usage"]:
        usage = {"input_tokens": p, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": c,
                 "output_tokens_details": {"reasoning_tokens": r}, "total_tokens": p + c}
    return {"id": ids("resp"), "object": "response", "created_at": CREATED, "status": status,
            "model": body.get("model"), "output": output, "usage": usage, "error": None,
            "incomplete_details": None, "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "store": body.get("store", True), "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0),
            "truncation": "disabled", "metadata": body.get("metadata") or {}}


def responses_json(body, reply, ids):
    obj = responses_object(body, reply, ids, "completed", responses_items(reply, ids))
    obj["output_text"] = reply["text"]
    return obj


def responses_stream(body, reply, ids):
    items = responses_items(reply, ids)
    ev = []

    def add(kind, **data):
        ev.append((kind, dict({"type": kind, "sequence_number": len(ev)}, **data)))

    add("response.created", response=responses_object(body, reply, ids, "in_progress", []))
    add("response.in_progress", response=responses_object(body, reply, ids, "in_progress", []))
    for n, it in enumerate(items):
        kind = it["type"]
        if kind == "message":
            text = it["content"][0]["text"]
            add("response.output_item.added", output_index=n, item=dict(it, status="in_progress", content=[]))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            add("response.content_part.added", item_id=it["id"], output_index=n, content_index=0, part=part)
            for p in pieces(text):
                add("response.output_text.delta", item_id=it["id"], output_index=n, content_index=0,
                    delta=p, logprobs=[])
            add("response.output_text.done", item_id=it["id"], output_index=n, content_index=0,
                text=text, logprobs=[])
            add("response.content_part.done", item_id=it["id"], output_index=n, content_index=0,
                part=dict(part, text=text))
        elif kind == "reasoning":
            text = it["content"][0]["text"]
            add("response.output_item.added", output_index=n, item=dict(it, content=[]))
            for p in pieces(text):
                add("response.reasoning_text.delta", item_id=it["id"], output_index=n, content_index=0, delta=p)
            add("response.reasoning_text.done", item_id=it["id"], output_index=n, content_index=0, text=text)
        elif kind == "function_call":
            add("response.output_item.added", output_index=n,
                item=dict(it, arguments="", status="in_progress"))
            for p in pieces(it["arguments"], 12):
                add("response.function_call_arguments.delta", item_id=it["id"], output_index=n, delta=p)
            add("response.function_call_arguments.done", item_id=it["id"], output_index=n,
                name=it["name"], arguments=it["arguments"])
        elif kind == "custom_tool_call":
            add("response.output_item.added", output_index=n, item=dict(it, input="", status="in_progress"))
            for p in pieces(it["input"], 12):
                add("response.custom_tool_call_input.delta", item_id=it["id"], output_index=n, delta=p)
            add("response.custom_tool_call_input.done", item_id=it["id"], output_index=n, input=it["input"])
        else:
            add("response.output_item.added", output_index=n, item=dict(it, status="in_progress"))
        add("response.output_item.done", output_index=n, item=it)
    add("response.completed", response=responses_object(body, reply, ids, "completed", items))
    return ev


def anthropic_blocks(reply, ids):
    blocks = []
    if reply["reasoning"]:
        blocks.append({"type": "thinking", "thinking": reply["reasoning"], "signature": ""})
    if reply["text"]:
        blocks.append({"type": "text", "text": reply["text"]})
    for i, c in enumerate(reply["calls"]):
        blocks.append({"type": "tool_use", "id": ids("toolu", i), "name": c["name"], "input": c["args"]})
    return blocks


def anthropic_message(body, reply, ids, content, final):
    p, c, _ = usage_numbers(body, reply)
    return {"id": ids("msg"), "type": "message", "role": "assistant", "model": body.get("model"),
            "content": content,
            "stop_reason": ("tool_use" if reply["calls"] else "end_turn") if final else None,
            "stop_sequence": None,
            "usage": {"input_tokens": p, "output_tokens": c if final else 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def anthropic_json(body, reply, ids):
    return anthropic_message(body, reply, ids, anthropic_blocks(reply, ids), True)


def anthropic_stream(body, reply, ids):
    ev = [("message_start", {"type": "message_start",
                             "message": anthropic_message(body, reply, ids, [], False)}),
          ("ping", {"type": "ping"})]
    for i, b in enumerate(anthropic_blocks(reply, ids)):
        def delta(d):
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}))
        if b["type"] == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
        elif b["type"] == "text":
            start = {"type": "text", "text": ""}
        else:
            start = dict(b, input={})
        ev.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
        if b["type"] == "thinking":
            for p in pieces(b["thinking"]):
                delta({"type": "thinking_delta", "thinking": p})
            delta({"type": "signature_delta", "signature": ""})
        elif b["type"] == "text":
            for p in pieces(b["text"]):
                delta({"type": "text_delta", "text": p})
        else:
            for p in pieces(json.dumps(b["input"]), 12):
                delta({"type": "input_json_delta", "partial_json": p})
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    _, c, _ = usage_numbers(body, reply)
    ev.append(("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": "tool_use" if reply["calls"] else "end_turn",
                                           "stop_sequence": None},
                                 "usage": {"output_tokens": c}}))
    ev.append(("message_stop", {"type": "message_stop"}))
    return ev


APIS = {
    # api: (last user turn, JSON builder, SSE builder)
    "chat": (last_user_chat, chat_json, chat_stream),
    "responses": (last_user_responses, responses_json, responses_stream),
    "anthropic": (last_user_anthropic, anthropic_json, anthropic_stream),
}


def bad_body(api, body):
    """Why the body cannot be served, or None."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not isinstance(body.get("model"), str):
        return "'model' is required"
    if api == "chat" and not (isinstance(body.get("messages"), list) and body["messages"]):
        return "'messages' must be a non-empty array"
    if api == "responses" and not isinstance(body.get("input"), (str, list)):
        return "'input' must be a string or an array"
    if api == "anthropic":
        if not isinstance(body.get("messages"), list):
            return "messages: Field required"
        if not isinstance(body.get("max_tokens"), int):
            return "max_tokens: Field required"
    return None


def error_body(api, status, message, param=None):
    if api == "anthropic":
        kind = {400: "invalid_request_error", 401: "authentication_error",
                404: "not_found_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = {400: "invalid_request_error", 401: "invalid_request_error",
            404: "invalid_request_error"}.get(status, "server_error")
    code = {401: "invalid_api_key", 404: "model_not_found" if param == "model" else None}.get(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# ---------------------------------------------------------------------------------------------
# HTTP


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-llm-server"

    def log_message(self, fmt, *args):
        pass

    # -- plumbing

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        enc = self.headers.get("Content-Encoding", "").lower()
        if enc == "gzip":
            data = gzip.decompress(data)
        elif enc == "deflate":
            data = zlib.decompress(data)
        elif enc:
            return None, "content-encoding %s is not supported" % enc, data
        return data, None, None

    def capture(self, body):
        st = self.server.state
        with st["lock"]:
            st["count"] += 1
            n = st["count"]
        if not st["dir"]:
            return n
        name = self.path.split("?")[0].strip("/").replace("/", "_") or "root"
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        headers = {}
        for k, v in self.headers.items():
            v = "<redacted>" if k.lower() in REDACT else v
            headers[k] = headers[k] + ", " + v if k in headers else v
        rec = {"method": self.command, "path": self.path, "headers": headers, "body": body}
        with open(os.path.join(st["dir"], "%03d_%s_%s.json" % (n, self.command, name)), "w") as f:
            json.dump(rec, f, indent=1, ensure_ascii=False)
            f.write("\n")
        return n

    def send(self, status, obj, extra=None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", "req_fake%d" % self.server.state["count"])
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, events):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", "req_fake%d" % self.server.state["count"])
        self.end_headers()
        for kind, data in events:
            if kind in OPTIONS["omit_events"]:
                continue
            text = data if isinstance(data, str) else json.dumps(data)
            msg = ("event: %s\n" % kind if kind else "") + "data: %s\n\n" % text
            raw = msg.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
            self.wfile.flush()
            time.sleep(0.002)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def finish_request_count(self):
        st = self.server.state
        if st["max_requests"] and st["count"] >= st["max_requests"]:
            log("served %d requests, stopping" % st["count"])
            threading.Thread(target=self.server.shutdown, daemon=True).start()

    # -- routing

    def route(self):
        path = self.path.split("?")[0].rstrip("/")
        if path.startswith("/v1/"):
            path = path[3:]
        return path

    def authorized(self):
        key = self.server.state["api_key"]
        if not key:
            return True
        auth = self.headers.get("Authorization", "")
        given = auth[7:] if auth.startswith("Bearer ") else None
        return key in (given, self.headers.get("x-api-key"), self.headers.get("api-key"))

    def do_GET(self):
        self.capture(None)
        path = self.route()
        if path == "/health":
            self.send(200, {"status": "ok"})
        elif not self.authorized():
            self.send(401, error_body("chat", 401, "Incorrect API key provided."))
        elif path == "/models":
            models = self.server.state["models"]
            data = [{"id": m, "object": "model", "created": CREATED, "owned_by": "capy",
                     "type": "model", "display_name": m, "created_at": "2026-01-01T00:00:00Z"}
                    for m in models]
            self.send(200, {"object": "list", "data": data, "has_more": False,
                            "first_id": models[0], "last_id": models[-1]})
        else:
            self.send(404, error_body("chat", 404, "Unknown path %s" % self.path))
        self.finish_request_count()

    def do_POST(self):
        raw, problem, undecoded = self.read_body()
        body = None
        if raw is not None:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        else:
            body = {"undecoded_base64": base64.b64encode(undecoded).decode()}
        n = self.capture(body)
        path = self.route()
        api = {"/chat/completions": "chat", "/responses": "responses", "/messages": "anthropic",
               "/messages/count_tokens": "anthropic"}.get(path)
        try:
            if api is None:
                self.send(404, error_body("chat", 404, "Unknown path %s" % self.path))
            elif problem:
                self.send(400, error_body(api, 400, problem))
            elif not self.authorized():
                self.send(401, error_body(api, 401, "Incorrect API key provided."))
            elif bad_body(api, body):
                self.send(400, error_body(api, 400, bad_body(api, body)))
            elif body["model"] not in self.server.state["models"]:
                self.send(404, error_body(api, 404, "The model `%s` does not exist." % body["model"],
                                          "model"))
            elif path == "/messages/count_tokens":
                self.send(200, {"input_tokens": max(1, len(json.dumps(body)) // 4)})
            else:
                self.answer(n, api, body)
        except (BrokenPipeError, ConnectionResetError) as e:
            log("#%d: client went away: %s" % (n, e))
        self.finish_request_count()

    def answer(self, n, api, body):
        last_user, as_json, as_sse = APIS[api]
        text = last_user(body)
        script = self.server.state["script"]
        raw = script.get("default", "Hello from fake.")
        rule = "default"
        for i, r in enumerate(script.get("rules") or []):
            if r.get("when_last_user_contains", "") in text:
                raw, rule = r.get("reply", ""), "rule %d" % i
                break
        reply = parse_reply(raw, tool_table(api, body))
        ids = Ids()
        stream = bool(body.get("stream"))
        log("#%d %s %s%s: %s -> %d chars, calls %s" % (
            n, self.command, self.path, " (stream)" if stream else "", rule, len(reply["text"]),
            [c["name"] for c in reply["calls"]]))
        if stream:
            self.send_sse(as_sse(body, reply, ids))
        else:
            self.send(200, as_json(body, reply, ids))


def main():
    ap = argparse.ArgumentParser(description="A scripted fake LLM API server that records requests.")
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("--capture-dir", help="write every request here")
    ap.add_argument("--script", help="the model's replies (JSON rules and default)")
    ap.add_argument("--model", action="append", help="a model name served (repeatable)")
    ap.add_argument("--api-key", help="require this key")
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument("--max-requests", type=int, default=0)
    ap.add_argument("--omit-event", action="append", default=[],
                    help="leave SSE events of this type out (repeatable), to see what a client needs")
    ap.add_argument("--no-usage", action="store_true", help="answer without usage")
    a = ap.parse_args()
    OPTIONS["omit_events"] = set(a.omit_event)
    OPTIONS["no_usage"] = a.no_usage
    script = {}
    if a.script:
        with open(a.script) as f:
            script = json.load(f)
    if a.capture_dir:
        os.makedirs(a.capture_dir, exist_ok=True)
    srv = Server(("127.0.0.1", a.port), Handler)
    srv.state = {"lock": threading.Lock(), "count": 0, "dir": a.capture_dir, "script": script,
                 "models": a.model or ["qwen3-fake"], "api_key": a.api_key,
                 "max_requests": a.max_requests}
    port = srv.server_address[1]
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % port)
        os.rename(a.port_file + ".tmp", a.port_file)
    log("listening on 127.0.0.1:%d for %g s" % (port, a.max_seconds))
    timer = threading.Timer(a.max_seconds, srv.shutdown)
    timer.daemon = True
    timer.start()
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    log("stopping after %d requests" % srv.state["count"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
