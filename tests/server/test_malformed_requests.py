"""
Malformed requests get a 4xx answer with OpenAI's error envelope, {"error": {"message", "type", ...}}, and
the server keeps serving: after every one of them a good request still works. The corpus is
tests/server/malformed/, one raw HTTP request per file, named STATUS-what-is-wrong.http (STATUS "4xx"
where any client error is right); a name with "-proto-" marks a request so broken at the HTTP level that
libmicrohttpd answers it before the API sees it, with its own HTML page: for those only the 4xx status
and the server going on are checked. In a file the header lines end in LF (sent as CRLF) and the body is
every byte after the blank line, less one final newline; Content-Length is added unless the file has its
own, and Connection: close always. Beside the corpus, requests too large or too odd for a file: a body
over the 1 MiB limit, 1,000- and 100,000-deep JSON nesting, and slow clients (slowloris: one byte a second;
a body shorter than its Content-Length) that the server's --timeout 2 must drop while it goes on serving.
"""
import json
import socket
import time
from pathlib import Path

import pytest
import requests

CORPUS = sorted((Path(__file__).parent / "malformed").glob("*.http"))
TIMEOUT_S = 2


@pytest.fixture(scope="module")
def strict_server(start_server):
    return start_server("malformed", args=["--timeout", str(TIMEOUT_S)])


def build_request(raw):
    head, sep, body = raw.partition(b"\n\n")
    if body.endswith(b"\n"):
        body = body[:-1]
    lines = head.split(b"\n")
    if not any(line.lower().startswith(b"content-length:") for line in lines) and lines[0].startswith(b"POST"):
        lines.append(b"Content-Length: %d" % len(body))
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def send_raw(port, data, timeout=10.0):
    """Send bytes, read the answer until the server closes; returns (status, headers, body bytes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before it has read a large body
        chunks, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                b = s.recv(1 << 16)
            except ConnectionResetError:
                break
            if not b:
                break
            chunks.append(b)
    return parse_response(b"".join(chunks))


def parse_response(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1."), f"no HTTP response: {raw[:200]!r}"
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while body:
            size_line, _, rest = body.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            out, body = out + rest[:size], rest[size + 2:]
        body = out
    return status, headers, body


def assert_error_envelope(status, headers, body, expected, envelope=True):
    if expected == "4xx":
        assert 400 <= status < 500, f"status {status}: {body[:300]!r}"
    else:
        assert status == int(expected), f"status {status}, expected {expected}: {body[:300]!r}"
    if not envelope:
        return
    assert headers.get("content-type", "").startswith("application/json"), headers
    err = json.loads(body)["error"]
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err


def still_serves(server):
    r = requests.post(server.v1 + "/completions", json={"prompt": "Once", "max_tokens": 3, "temperature": 0},
                      timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"]


def test_the_corpus_is_there():
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_malformed_request_gets_an_openai_error_and_the_server_goes_on(strict_server, path):
    expected = path.stem.split("-", 1)[0]
    status, headers, body = send_raw(strict_server.port, build_request(path.read_bytes()))
    assert_error_envelope(status, headers, body, expected, envelope="-proto-" not in path.stem)
    still_serves(strict_server)


def json_request(path, body):
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (path.encode(), len(body)) + body)


def test_body_over_one_mebibyte_is_refused_with_413(strict_server):
    body = json.dumps({"prompt": "x" * (1 << 20), "max_tokens": 1}).encode()
    assert_error_envelope(*send_raw(strict_server.port, json_request("/v1/completions", body)), "413")
    still_serves(strict_server)


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_deeply_nested_json_is_a_bad_request(strict_server, depth):
    body = b'{"prompt": ' + b"[" * depth + b"]" * depth + b', "max_tokens": 1}'
    assert_error_envelope(*send_raw(strict_server.port, json_request("/v1/completions", body)), "400")
    nested_messages = b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"
    assert_error_envelope(*send_raw(strict_server.port, json_request("/v1/chat/completions", nested_messages)),
                          "400")
    still_serves(strict_server)


def wait_for_close(sock, send_bytes, limit_s):
    """Send one byte of send_bytes a second until the server closes the connection or limit_s passes;
    returns the seconds until the close, or None if it stayed open."""
    start = time.monotonic()
    sock.settimeout(1.0)
    for b in send_bytes:
        if time.monotonic() - start > limit_s:
            return None
        try:
            sock.sendall(bytes([b]))
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - start
        else:
            # The server answered (408 or similar): wait for its close.
            try:
                while sock.recv(4096):
                    pass
            except (socket.timeout, ConnectionResetError):
                pass
            return time.monotonic() - start
    return None


@pytest.mark.timeout(60)
def test_slowloris_client_is_dropped_after_the_timeout_while_others_are_served(strict_server):
    request = build_request((CORPUS[0].parent / "400-prompt-missing.http").read_bytes())
    with socket.create_connection(("127.0.0.1", strict_server.port), timeout=5) as slow:
        # Meanwhile another client is served at once.
        t = time.monotonic()
        still_serves(strict_server)
        assert time.monotonic() - t < 5
        closed_after = wait_for_close(slow, request, limit_s=5 * TIMEOUT_S + 5)
    assert closed_after is not None, "a client sending one byte a second was never dropped"
    still_serves(strict_server)


@pytest.mark.timeout(60)
def test_body_shorter_than_its_content_length_times_out(strict_server):
    with socket.create_connection(("127.0.0.1", strict_server.port), timeout=5) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"prompt\"")
        s.settimeout(3 * TIMEOUT_S + 5)
        start = time.monotonic()
        try:
            data = b""
            while True:
                b = s.recv(4096)
                if not b:
                    break
                data += b
        except ConnectionResetError:
            pass
        except socket.timeout:
            pytest.fail("the server kept waiting for the body")
        assert time.monotonic() - start <= 3 * TIMEOUT_S + 1, "the server kept waiting for the body"
        if data:
            assert_error_envelope(*parse_response(data), "4xx")
    still_serves(strict_server)
