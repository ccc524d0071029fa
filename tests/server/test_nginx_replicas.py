"""
Two `kiln serve` replicas behind Debian's nginx, configured by deploy/nginx.conf itself (its listen and
replica ports substituted; nginx runs as the current user under a temporary prefix, no root paths): both
replicas take traffic, and when one is killed while clients keep sending requests, every request started
after the kill succeeds: nginx's passive health checks (proxy_next_upstream error timeout http_502
http_503, max_fails) send them to the survivor. Streams pass through unbuffered to the [DONE] marker.
"""
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import ROOT, die_with_parent, free_port
from sse import RawSSE, pump

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(120)]

MAIN_CONF = """\
{user}worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 512; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    include {prefix}/kiln.conf;
}}
"""


def site_config(listen, replicas):
    """deploy/nginx.conf with the test's ports in place of 8080 (listen) and 8081, 8082 (replicas)."""
    text = (ROOT / "deploy" / "nginx.conf").read_text()
    text, n = re.subn(r"listen 127\.0\.0\.1:8080;", f"listen 127.0.0.1:{listen};", text)
    assert n == 1
    for default, port in zip((8081, 8082), replicas):
        text, n = re.subn(rf"server 127\.0\.0\.1:{default}\b", f"server 127.0.0.1:{port}", text)
        assert n == 1
    return text


@pytest.fixture
def nginx(tmp_path):
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(binary):
        pytest.fail("nginx is not installed (scripts/apt-install.sh nginx)")
    procs = []

    def start(replica_ports):
        prefix = tmp_path / "nginx"
        (prefix / "tmp").mkdir(parents=True)
        port = free_port()
        (prefix / "kiln.conf").write_text(site_config(port, replica_ports))
        # As root, nginx would switch its workers to "nobody", who cannot enter the private temp dir.
        user = "user root;\n" if os.geteuid() == 0 else ""
        (prefix / "nginx.conf").write_text(MAIN_CONF.format(prefix=prefix, user=user))
        p = subprocess.Popen([binary, "-p", str(prefix), "-e", str(prefix / "error.log"), "-c",
                              str(prefix / "nginx.conf"), "-g", "daemon off;"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=die_with_parent)
        procs.append(p)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert p.poll() is None, f"nginx exited: {p.stderr.read().decode()} {read(prefix / 'error.log')}"
            try:
                if requests.get(base + "/health", timeout=2).status_code == 200:
                    return base, port, prefix
            except requests.RequestException:
                time.sleep(0.1)
        pytest.fail("nginx did not answer /health: " + read(prefix / "error.log"))

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGQUIT)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def read(path):
    try:
        return Path(path).read_text()[-3000:]
    except OSError:
        return ""


def test_killing_one_replica_leaves_requests_succeeding_through_nginx(start_server, nginx):
    a = start_server("replica-a")
    b = start_server("replica-b")
    base, port, prefix = nginx([a.port, b.port])
    a0, b0 = (s.metrics()['kiln_requests_total{status="ok"}'] for s in (a, b))

    stop = threading.Event()
    log = []  # (start time, end time, outcome)

    def client():
        for i in range(10_000):
            if stop.is_set():
                return
            t = time.monotonic()
            try:
                r = requests.post(base + "/v1/completions", timeout=20,
                                  json={"prompt": "Once upon a time", "max_tokens": 24, "seed": i})
                ok = r.status_code == 200 and r.json()["choices"][0]["text"]
                log.append((t, time.monotonic(), "ok" if ok else f"status {r.status_code}: {r.text[:200]}"))
            except requests.RequestException as e:
                log.append((t, time.monotonic(), repr(e)))

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    try:
        time.sleep(2.0)
        assert (a.metrics()['kiln_requests_total{status="ok"}'] > a0 and
                b.metrics()['kiln_requests_total{status="ok"}'] > b0), "nginx did not spread the requests"
        killed_at = time.monotonic()
        a.proc.kill()
        a.proc.wait(10)
        time.sleep(4.0)
    finally:
        stop.set()
        for t in threads:
            t.join(30)

    after = [outcome for start, _, outcome in log if start > killed_at]
    in_flight = [outcome for start, end, outcome in log if start <= killed_at < end]
    assert len(after) >= 20, f"only {len(after)} requests after the kill"
    assert all(o == "ok" for o in after), [o for o in after if o != "ok"][:5]
    assert sum(o != "ok" for o in in_flight) <= len(threads)

    # Streams pass through nginx to the end.
    s = RawSSE(port, "/v1/completions", {"prompt": "The cat", "max_tokens": 32, "stream": True})
    assert pump([s], lambda: s.done, time.monotonic() + 30)
    s.close()
    assert s.status == 200 and s.saw_done_marker and len(s.token_times()) >= 2
