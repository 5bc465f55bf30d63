#!/usr/bin/env python3
"""A small HTTP proxy in front of the local S3 server, for om4's object-storage tests and
benchmarks: it adds per-request latency and injects faults. Standard library only; listens on
127.0.0.1 only.

    python3 scripts/s3-proxy.py --upstream http://127.0.0.1:PORT [--latency-ms 50]
        [--fail-every N --fail-status 503] [--reset-every N] [--stall-every N --stall-s S]
        [--match REGEX] [--once]

Prints `port PORT` on the first line of stdout once it listens, then serves until killed.
Faults count the requests whose path matches --match (default: every request): the Nth, 2Nth, ...
such request gets the fault. `--fail-every 1` fails every matching request; with `--once` a
request (method, path, range) is faulted at most once, so its retry goes through. A reset closes the
connection without an answer (RST); a stall answers after --stall-s seconds. GET /__proxy/stats
answers the counts of forwarded requests and injected faults as JSON.
"""

import argparse
import http.client
import http.server
import json
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


class Faults:
    def __init__(self, args):
        self.args = args
        self.match = re.compile(args.match) if args.match else None
        self.lock = threading.Lock()
        self.seen = 0
        self.faulted = set()
        self.stats = {"forwarded": 0, "failed": 0, "reset": 0, "stalled": 0}

    def pick(self, method, path, headers):
        """The fault for this request: None, 'fail', 'reset' or 'stall'."""
        if self.match is not None and not self.match.search(path):
            return None
        request = (method, path, headers.get("Range"))
        with self.lock:
            if self.args.once and request in self.faulted:
                return None
            self.seen += 1
            n = self.seen
            a = self.args
            for every, fault in ((a.reset_every, "reset"), (a.stall_every, "stall"), (a.fail_every, "fail")):
                if every and n % every == 0:
                    self.faulted.add(request)
                    return fault
        return None

    def count(self, what):
        with self.lock:
            self.stats[what] += 1


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def upstream(self):
        conn = getattr(self, "_upstream", None)
        if conn is None:
            u = self.server.upstream
            conn = self._upstream = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        return conn

    def forward(self):
        faults = self.server.faults
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.path == "/__proxy/stats":
            data = json.dumps(faults.stats).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.server.latency:
            time.sleep(self.server.latency)
        fault = faults.pick(self.command, self.path, self.headers)
        if fault == "reset":
            faults.count("reset")
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if fault == "stall":
            faults.count("stalled")
            time.sleep(self.server.args.stall_s)
        if fault == "fail":
            faults.count("failed")
            data = b"<Error><Code>InternalError</Code><Message>injected by s3-proxy</Message></Error>"
            self.send_response(self.server.args.fail_status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        for attempt in range(2):  # a kept-alive upstream connection may have been closed
            conn = self.upstream()
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.HTTPException, ConnectionError, OSError):
                conn.close()
                self._upstream = None
                if attempt:
                    raise
        faults.count("forwarded")
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--upstream", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--fail-status", type=int, default=503)
    p.add_argument("--reset-every", type=int, default=0)
    p.add_argument("--stall-every", type=int, default=0)
    p.add_argument("--stall-s", type=float, default=10.0)
    p.add_argument("--match", default="")
    p.add_argument("--once", action="store_true", help="fault each request (method, path, range) at most once")
    args = p.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.request_queue_size = 1024
    server.upstream = urllib.parse.urlparse(args.upstream)
    server.latency = args.latency_ms / 1000.0
    server.faults = Faults(args)
    server.args = args
    print(f"port {server.server_address[1]}", flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
