#!/usr/bin/env python3
"""sock-relay.py - copy byte streams from one socket address to another, both ways.

    sock-relay.py [--ready FILE] [--max-seconds S] LISTEN CONNECT

LISTEN and CONNECT are tcp:HOST:PORT or unix:PATH. Each connection accepted on LISTEN gets its
own connection to CONNECT; bytes are copied both ways until both sides have closed. --ready
FILE is created once LISTEN accepts connections. The relay exits after --max-seconds (default
600).

The agent runners use two of these to let a CLI locked in a network namespace of its own
(unshare -n: loopback only) reach a server on the host's loopback: a relay outside listens on a
unix socket in the scratch directory (the file system is shared across network namespaces) and
connects to the server; one inside listens on 127.0.0.1:PORT and connects to that socket.
"""
import argparse
import os
import socket
import sys
import threading


def parse(addr):
    kind, _, rest = addr.partition(":")
    if kind == "unix" and rest:
        return socket.AF_UNIX, rest
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        if host and port.isdigit():
            return socket.AF_INET, (host, int(port))
    sys.exit("sock-relay: bad address '%s' (tcp:HOST:PORT or unix:PATH)" % addr)


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def serve(client, target):
    family, addr = target
    try:
        upstream = socket.socket(family, socket.SOCK_STREAM)
        upstream.connect(addr)
    except OSError as e:
        print("sock-relay: cannot connect to %s: %s" % (addr, e), file=sys.stderr)
        client.close()
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def main():
    ap = argparse.ArgumentParser(description="Relay connections between tcp: and unix: addresses.")
    ap.add_argument("--ready", help="create this file once listening")
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("listen")
    ap.add_argument("connect")
    a = ap.parse_args()
    family, addr = parse(a.listen)
    target = parse(a.connect)
    srv = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    elif os.path.exists(addr):
        os.unlink(addr)
    srv.bind(addr)
    srv.listen(64)
    if a.ready:
        open(a.ready, "w").close()
    timer = threading.Timer(a.max_seconds, os._exit, args=(0,))
    timer.daemon = True
    timer.start()
    while True:
        client, _ = srv.accept()
        threading.Thread(target=serve, args=(client, target), daemon=True).start()


if __name__ == "__main__":
    main()
