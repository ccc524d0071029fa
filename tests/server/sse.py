"""
sse.py - a raw HTTP/1.1 client for server-sent events that timestamps every event as it arrives, for the
tests that measure gaps between tokens. It speaks to sockets directly (no client library, no thread per
stream): one select loop reads every stream, so the Python interpreter's thread switching does not add
its own gaps to the measurement. Handles chunked transfer encoding.
"""
import json
import selectors
import socket
import time


class RawSSE:
    """One POST whose response is read as SSE: .events holds (arrival time, parsed JSON) per data event,
    .done is set at [DONE] or when the connection closes, .status is the HTTP status."""

    def __init__(self, port, path, body, headers=None):
        data = json.dumps(body).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n{extra}\r\n")
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sent_at = time.monotonic()
        self.sock.sendall(head.encode() + data)
        self.sock.setblocking(False)
        self.raw = b""       # bytes not yet parsed as headers or chunks
        self.body = b""      # the decoded body not yet split into events
        self.status = None
        self.chunked = False
        self.events = []
        self.done = False
        self.saw_done_marker = False

    def fileno(self):
        return self.sock.fileno()

    def close(self):
        self.sock.close()

    def on_readable(self):
        now = time.monotonic()
        try:
            data = self.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except ConnectionError:
            data = b""
        if not data:
            self.done = True
            return
        self.raw += data
        if self.status is None:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.raw = self.raw[:end].decode("latin-1"), self.raw[end + 4:]
            self.status = int(head.split(" ", 2)[1])
            self.chunked = "transfer-encoding: chunked" in head.lower()
        self._decode_body()
        while b"\n\n" in self.body:
            event, self.body = self.body.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.saw_done_marker = True
                    self.done = True
                else:
                    self.events.append((now, json.loads(payload)))

    def _decode_body(self):
        if not self.chunked:
            self.body += self.raw
            self.raw = b""
            return
        while True:
            eol = self.raw.find(b"\r\n")
            if eol < 0:
                return
            size = int(self.raw[:eol].split(b";")[0], 16)
            if size == 0:
                self.raw = b""
                return
            if len(self.raw) < eol + 2 + size + 2:
                return
            self.body += self.raw[eol + 2:eol + 2 + size]
            self.raw = self.raw[eol + 2 + size + 2:]

    def token_times(self):
        """Arrival times of the events that carry generated text (usage-only chunks excluded)."""
        return [t for t, ev in self.events if ev.get("choices")]


def pump(streams, until, deadline):
    """Read every open stream until until() is true or the monotonic deadline passes; returns until()."""
    sel = selectors.DefaultSelector()
    for s in streams:
        if not s.done:
            sel.register(s, selectors.EVENT_READ)
    try:
        while not until():
            left = deadline - time.monotonic()
            if left <= 0 or not sel.get_map():
                break
            for key, _ in sel.select(min(left, 0.5)):
                key.fileobj.on_readable()
                if key.fileobj.done:
                    sel.unregister(key.fileobj)
    finally:
        sel.close()
    return until()
