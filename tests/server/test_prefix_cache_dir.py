"""
test_prefix_cache_dir.py - `kiln serve --prefix-cache-dir DIR`: the prefix cache outlives a restart. At
SIGTERM every cached prompt is written to DIR; the next server started with DIR reads them back before it
is ready, so the same request reuses its prompt (usage.prompt_tokens_details.cached_tokens) and returns
the same text at temperature 0, with no slot action by hand. A file that does not restore (truncated,
from another model) is named on stderr and skipped: the server starts and serves. Files of a larger
earlier cache are removed at the next save.
"""
import requests

PROMPTS = ["Once upon a time, there was a little girl named Lily.",
           "The sun was hot and the dog wanted to play in the park."]


def complete(server, prompt):
    r = requests.post(server.v1 + "/completions", json={
        "model": "m", "prompt": prompt, "max_tokens": 10, "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_cached_prompts_survive_a_restart(start_server, tmp_path):
    args = ["--prefix-cache-dir", str(tmp_path)]
    first = start_server("pcache-before", args=args)
    before = [complete(first, p) for p in PROMPTS]
    first.check_clean_exit()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["prefix-000.kvs", "prefix-001.kvs"], files
    assert "saved 2 cached prompts" in first.log()

    second = start_server("pcache-after", args=args)
    assert "restored 2 cached prompts" in second.log(), second.log()[-2000:]
    for prompt, a in zip(PROMPTS, before):
        b = complete(second, prompt)
        assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == b["usage"]["prompt_tokens"] - 1, b
        assert b["choices"][0]["text"] == a["choices"][0]["text"]
    second.check_clean_exit()


def test_a_file_that_does_not_restore_is_named_and_skipped(start_server, tmp_path):
    args = ["--prefix-cache-dir", str(tmp_path)]
    first = start_server("pcache-one", args=args)
    a = complete(first, PROMPTS[0])
    first.check_clean_exit()
    good = (tmp_path / "prefix-000.kvs").read_bytes()
    (tmp_path / "prefix-000.kvs").write_bytes(good[:100])   # truncated: refused by name
    (tmp_path / "prefix-001.kvs").write_bytes(good)          # intact: restored
    (tmp_path / "prefix-002.kvs").write_bytes(b"KILN" * 64)  # not a state file
    (tmp_path / "prefix-004.kvs").write_bytes(good)          # after a gap: not read, removed at save

    second = start_server("pcache-bad", args=args)
    log = second.log()
    assert "prefix-000.kvs not restored" in log and "prefix-002.kvs not restored" in log, log[-2000:]
    assert "restored 1 cached prompts" in log, log[-2000:]
    b = complete(second, PROMPTS[0])
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert b["choices"][0]["text"] == a["choices"][0]["text"]
    second.check_clean_exit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prefix-000.kvs"]


def test_a_missing_folder_is_a_usage_error(start_server, tmp_path):
    import subprocess
    from conftest import KilnServer
    cmd = KilnServer(tmp_path, args=["--prefix-cache-dir", str(tmp_path / "nope")]).command()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--prefix-cache-dir" in r.stderr and "not a folder" in r.stderr, r.stderr
