"""
conftest.py - the harness of the `kiln serve` tests: it starts servers on 127.0.0.1 with --port 0 (the
server picks a free port and prints it), waits for GET /health, and always stops them in teardown
(SIGTERM, then SIGKILL after a bound; and SIGKILL if the test process itself dies). A server that a test
did not kill on purpose must exit with status 0 and print no sanitizer report, so the ASan build checks
every server's shutdown for leaks and errors too.

Environment (ctest sets the first three; see CMakeLists.txt):
  KILN_BIN           the kiln binary of the build under test (default: build/kiln)
  KILN_TEST_TMP      where server logs and screenshots go (default: a pytest temporary directory)
  KILN_SERVER_TESTS  "all" (default) or "light": light skips the tests marked heavy (load, browser,
                     nginx), which the ASan build does
  KILN_LOAD_SECONDS  duration of the load test (default 60)
  KILN_MODEL         the model (default: the bundled models/stories260K.gguf)
"""
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import ctypes
import itertools
import openai
import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
KILN_BIN = os.environ.get("KILN_BIN", str(ROOT / "build" / "kiln"))
MODEL = os.environ.get("KILN_MODEL", str(ROOT / "models" / "stories260K.gguf"))
LIGHT = os.environ.get("KILN_SERVER_TESTS", "all") == "light"
_serial = itertools.count()
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def pytest_configure(config):
    config.addinivalue_line("markers", "heavy: load, browser and nginx tests; skipped when "
                                       "KILN_SERVER_TESTS=light (the ASan build)")


def pytest_collection_modifyitems(config, items):
    if not LIGHT:
        return
    skip = pytest.mark.skip(reason="heavy test: KILN_SERVER_TESTS=light")
    for item in items:
        if "heavy" in item.keywords:
            item.add_marker(skip)


def die_with_parent():
    """preexec_fn: the child gets SIGKILL when the test process dies, even if teardown never runs."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port():
    """A port that was free a moment ago on 127.0.0.1 (the server retries on the rare collision)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_metrics(text):
    """Prometheus text format to {name or name{labels}: float}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


class KilnServer:
    """One `kiln serve` process. Its stdout and stderr go to LOGDIR/NAME-SERIAL.log."""

    def __init__(self, logdir, name="kiln", args=(), model=MODEL, threads=1, env=None):
        self.logdir = Path(logdir)
        self.name = name
        self.args = list(args)
        self.model = model
        self.threads = threads
        self.env = env
        self.proc = None
        self.port = None
        self.log_path = None

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def v1(self):
        return self.base + "/v1"

    def command(self):
        return [KILN_BIN, "serve", "-m", self.model, "--host", "127.0.0.1", "--port", "0",
                "-t", str(self.threads), *self.args]

    def start(self, timeout=60.0):
        """Start with --port 0: the server picks a free port and prints it in its "listening on" line."""
        self.log_path = self.logdir / f"{self.name}-{next(_serial)}.log"
        env = dict(os.environ, **(self.env or {}))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on http://\S*?:(\d+)", self.log())
            if m:
                self.port = int(m.group(1))
                if self._wait_healthy(deadline - time.monotonic()):
                    return self
                break
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"kiln serve did not become healthy: {self.command()}\n{self.log()[-4000:]}")

    def _wait_healthy(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if requests.get(self.base + "/health", timeout=2).status_code == 200:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.05)
        return False

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def metrics(self):
        r = requests.get(self.base + "/metrics", timeout=10)
        r.raise_for_status()
        return parse_metrics(r.text)

    def stop(self, sig=signal.SIGTERM, timeout=30.0):
        """Signal the server and wait; returns its exit status (SIGKILL after timeout: then -9)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def check_clean_exit(self):
        """Stop with SIGTERM and require status 0 and no sanitizer report in the log."""
        code = self.stop()
        log = self.log()
        reports = [m for m in SANITIZER_MARKS if m in log]
        assert not reports, f"{self.name}: sanitizer report in {self.log_path}:\n{log[-6000:]}"
        assert code == 0, f"{self.name}: exit status {code} after SIGTERM; log {self.log_path}:\n{log[-3000:]}"


@pytest.fixture(scope="session")
def logdir(tmp_path_factory):
    base = os.environ.get("KILN_TEST_TMP")
    if base:
        d = Path(base) / "server-logs"
        d.mkdir(parents=True, exist_ok=True)
        return d
    return tmp_path_factory.mktemp("server-logs")


@pytest.fixture(scope="session")
def start_server(logdir):
    """start_server(name, args...) -> a healthy KilnServer, stopped (and checked) at the end of the session
    unless the test stopped it first. Use the `server` fixture unless a test needs its own flags."""
    started = []

    def start(name="kiln", args=(), **kw):
        s = KilnServer(logdir, name=name, args=args, **kw).start()
        started.append(s)
        return s

    yield start
    problems = []
    for s in started:
        if s.proc.returncode is not None:
            continue
        try:
            s.check_clean_exit()
        except AssertionError as e:
            problems.append(str(e))
        finally:
            s.kill()
    assert not problems, "\n\n".join(problems)


@pytest.fixture(scope="session")
def server(start_server):
    """The shared default server: the bundled model, default flags."""
    return start_server("default")


@pytest.fixture(scope="session")
def client(server):
    return openai.OpenAI(base_url=server.v1, api_key="no-key", timeout=60, max_retries=0)


@pytest.fixture(scope="session")
def model_id(client):
    return client.models.list().data[0].id


def kiln_run(prompt, n_predict, *extra):
    """What `kiln run -p PROMPT -n N --temp 0` prints after the prompt (stdout is prompt + generation)."""
    r = subprocess.run([KILN_BIN, "run", "-m", MODEL, "-p", prompt, "-n", str(n_predict), "--temp", "0",
                        "-t", "1", *extra], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = r.stdout.decode()
    assert out.startswith(prompt)
    return out[len(prompt):]
