#!/usr/bin/env python3
"""serve-client.py - drives capy-serve from the tests and benchmarks (Python standard library only).

    serve-client.py replay URL SESSION.jsonl          the recorded session, request after request
    serve-client.py concurrent URL N BODY.json...     N streamed chat requests at once (bodies in turn)
    serve-client.py load URL CLIENTS SECONDS BODY.json clients looping streamed requests until time is up
    serve-client.py ttft URL BODY.json REPEAT         time to the first streamed token, REPEAT times

Each prints one JSON object on stdout. Streams are read as OpenAI chat completion chunks: the text is
the concatenation of delta.content and delta.reasoning_content, usage from the last chunk. Every request
has a timeout; a failed one counts in "errors" with its reason in "error_examples".
"""
import http.client
import json
import sys
import threading
import time
import urllib.parse

TIMEOUT = 120


def post_stream(url, body, on_first=None, times=None):
    """POST a streamed chat (or, with "prompt" in the body, completions) request; returns (text,
    usage, n_chunks); times, if given, gets the monotonic times of the first text and the end.
    Raises on any error."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=TIMEOUT)
    path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
    try:
        data = json.dumps(body).encode()
        conn.request("POST", path, data, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError("status %d: %s" % (r.status, r.read()[:300]))
        text, usage, n, done = [], None, 0, False
        for raw in r:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            if payload == "[DONE]":
                done = True
                break
            chunk = json.loads(payload)
            if "error" in chunk:
                raise RuntimeError("stream error: %s" % chunk["error"])
            n += 1
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk.get("choices", []):
                d = ch.get("delta", {})
                piece = (d.get("reasoning_content") or "") + (d.get("content") or "") + (ch.get("text") or "")
                for tc in d.get("tool_calls") or []:
                    f = tc.get("function", {})
                    piece += (f.get("name") or "") + (f.get("arguments") or "")
                if piece and on_first:
                    on_first()
                    on_first = None
                if piece and times is not None and not times:
                    times.append(time.monotonic())
                text.append(piece)
        if not done:
            raise RuntimeError("the stream ended without [DONE]")
        if times is not None:
            times.append(time.monotonic())
        return "".join(text), usage, n
    finally:
        conn.close()


def replay(url, path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    out = {"requests": 0, "prompt_tokens": 0, "cached_tokens": 0, "errors": 0, "error_examples": [], "turns": []}
    t0 = time.monotonic()
    for row in rows:
        try:
            _, usage, _ = post_stream(url, row["body"])
            p = usage["prompt_tokens"]
            c = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
            out["requests"] += 1
            out["prompt_tokens"] += p
            out["cached_tokens"] += c
            out["turns"].append([row["conversation"], row["turn"], p, c])
        except Exception as e:  # noqa: BLE001 - every failure is reported
            out["errors"] += 1
            out["error_examples"] = (out["error_examples"] + [str(e)])[:5]
    out["seconds"] = round(time.monotonic() - t0, 3)
    out["cached_share"] = round(out["cached_tokens"] / out["prompt_tokens"], 4) if out["prompt_tokens"] else 0
    return out


def concurrent(url, n, bodies):
    results = [None] * n
    errors = []

    def run(i):
        try:
            times = []
            text, usage, _ = post_stream(url, bodies[i % len(bodies)], times=times)
            results[i] = {"text": text, "completion_tokens": usage["completion_tokens"] if usage else None,
                          "first": times[0] if len(times) > 1 else None, "end": times[-1]}
        except Exception as e:  # noqa: BLE001
            errors.append(str(e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT + 10)
    secs = time.monotonic() - t0
    done = [r for r in results if r]
    tokens = sum(r["completion_tokens"] or 0 for r in done)
    # Decode rate: tokens after each request's first, over the time from the last first token
    # (all are generating by then) to the last end.
    firsts = [r["first"] for r in done if r["first"]]
    span = max(r["end"] for r in done) - max(firsts) if firsts else 0
    after_first = sum(max((r["completion_tokens"] or 0) - 1, 0) for r in done)
    for r in done:
        r.pop("first", None)
        r.pop("end", None)
    return {"seconds": round(secs, 3), "results": results, "errors": len(errors), "error_examples": errors[:5],
            "completion_tokens": tokens, "tokens_per_second": round(tokens / secs, 2) if secs else 0,
            "decode_tokens_per_second": round(after_first / span, 2) if span > 0 else 0}


def load(url, clients, seconds, body):
    stats = {"requests": 0, "errors": 0, "completion_tokens": 0, "error_examples": []}
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def run():
        while time.monotonic() < end:
            try:
                _, usage, _ = post_stream(url, body)
                with lock:
                    stats["requests"] += 1
                    stats["completion_tokens"] += usage["completion_tokens"] if usage else 0
            except Exception as e:  # noqa: BLE001
                with lock:
                    stats["errors"] += 1
                    stats["error_examples"] = (stats["error_examples"] + [str(e)])[:5]

    threads = [threading.Thread(target=run) for _ in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + TIMEOUT + 10)
    stats["seconds"] = round(time.monotonic() - t0, 3)
    return stats


def ttft(url, body, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.monotonic()
        first = []
        post_stream(url, body, on_first=lambda: first.append(time.monotonic()))
        times.append((first[0] if first else time.monotonic()) - t0)
    order = list(times)
    times.sort()
    return {"ttft_s": times, "ttft_order": order, "median_s": times[len(times) // 2]}


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    mode, url = argv[1], argv[2]
    if mode == "replay":
        out = replay(url, argv[3])
    elif mode == "concurrent":
        out = concurrent(url, int(argv[3]), [json.load(open(p)) for p in argv[4:]])
    elif mode == "load":
        out = load(url, int(argv[3]), float(argv[4]), json.load(open(argv[5])))
    elif mode == "ttft":
        out = ttft(url, json.load(open(argv[3])), int(argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
