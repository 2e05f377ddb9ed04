#!/usr/bin/env python3
"""httpd.py - the loopback HTTP server drun's fetch tests and benchmark talk to.

Python 3 standard library only. It binds 127.0.0.1 (or --bind ADDR, another loopback
address) on a free port, prints "PORT <n>" on stdout and serves until killed or until
its stdin closes, so a test that dies never leaves it behind.

Routes (query parameters in brackets):
  /plain[?body=TEXT&type=CTYPE]   a plain response
  /status?code=N                  an empty response with status N
  /echo                           the method, every request header and the body, as text
  /redirect?to=URL[&code=302]     a redirect to URL (the Location header, as given)
  /loop                           a redirect to itself
  /endless                        a body that never ends (no Content-Length)
  /big?size=N                     exactly N bytes of 'x' with a Content-Length
  /bomb                           gzip of 10 GB of zeros, small on the wire
  /headers-forever                a status line followed by header lines without end
  /never                          accepts the connection and never answers
  /slow?chunks=N&delay=MS         N chunks of 1 KiB, MS milliseconds apart
  /html?assets=A,B,...            an HTML page linking the given asset URLs
                                  (stylesheet, icon, script, img in turn)
"""
import html
import socketserver
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlsplit

CHUNK = b"x" * (1 << 20)
BOMB_TOTAL = 10 * (1 << 30)  # decoded size of /bomb
BOMB_BLOCK = 1 << 20  # zeros per compressed block


def bomb_block():
    """One deflate block of BOMB_BLOCK zeros ending in a full flush, so it can be
    repeated: a full flush byte-aligns the stream and drops the history window."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(bytes(BOMB_BLOCK)) + c.flush(zlib.Z_FULL_FLUSH)


BOMB = bomb_block()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet: tests read only their own output
        pass

    def q(self, name, default=None):
        v = parse_qs(urlsplit(self.path).query).get(name)
        return v[0] if v else default

    def send_body(self, code, body, ctype="text/plain", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        path = urlsplit(self.path).path
        n = int(self.headers.get("Content-Length") or 0)
        reqbody = self.rfile.read(n) if n else b""
        if path == "/plain":
            self.send_body(200, self.q("body", "hello").encode(), self.q("type", "text/plain"))
        elif path == "/status":
            self.send_body(int(self.q("code", "200")), b"")
        elif path == "/echo":
            out = "method: %s\n" % self.command
            for k, v in self.headers.items():
                out += "%s: %s\n" % (k, v)
            out += "\n"
            self.send_body(200, out.encode() + reqbody)
        elif path == "/redirect":
            self.send_body(int(self.q("code", "302")), b"moved", extra=[("Location", self.q("to"))])
        elif path == "/loop":
            self.send_body(302, b"again", extra=[("Location", "/loop")])
        elif path == "/endless":
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            while True:
                self.wfile.write(CHUNK)
        elif path == "/big":
            size = int(self.q("size", "0"))
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            while size > 0:
                k = min(size, len(CHUNK))
                self.wfile.write(CHUNK[:k])
                size -= k
        elif path == "/bomb":
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")
            for _ in range(BOMB_TOTAL // BOMB_BLOCK):
                self.wfile.write(BOMB)
            # A final empty block and the trailer. A client that honours its cap stops
            # long before this; the CRC is left 0 rather than spend seconds on 10 GB.
            self.wfile.write(b"\x03\x00" + (0).to_bytes(4, "little")
                             + (BOMB_TOTAL & 0xFFFFFFFF).to_bytes(4, "little"))
        elif path == "/headers-forever":
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            i = 0
            while True:
                self.wfile.write(b"X-Filler-%d: %s\r\n" % (i, b"y" * 64))
                i += 1
        elif path == "/never":
            threading.Event().wait()
        elif path == "/slow":
            chunks = int(self.q("chunks", "5"))
            delay = int(self.q("delay", "100")) / 1000.0
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(chunks * 1024))
            self.end_headers()
            for _ in range(chunks):
                self.wfile.write(b"s" * 1024)
                self.wfile.flush()
                time.sleep(delay)
        elif path == "/html":
            assets = [a for a in (self.q("assets", "") or "").split(",") if a]
            kinds = ['<link rel="stylesheet" href="%s">', '<link rel="shortcut icon" href="%s">',
                     '<script src="%s"></script>', '<img src="%s">']
            body = "<!doctype html><html><head><title>t</title>\n"
            for i, a in enumerate(assets):
                body += kinds[i % len(kinds)] % html.escape(a) + "\n"
            body += "</head><body>page</body></html>\n"
            self.send_body(200, body.encode(), "text/html; charset=utf-8")
        else:
            self.send_body(404, b"not found")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = handle_any


class Server(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hangs up on an endless body is what the tests do on purpose.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)
    allow_reuse_address = True
    request_queue_size = 64


def main():
    bind = "127.0.0.1"
    if len(sys.argv) > 2 and sys.argv[1] == "--bind":
        bind = sys.argv[2]
    srv = Server((bind, 0), Handler)
    print("PORT %d" % srv.server_address[1], flush=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    while sys.stdin.buffer.read(4096):  # ends when the parent closes our stdin or dies
        pass


if __name__ == "__main__":
    main()
