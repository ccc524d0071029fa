"""
test_slots.py - llama-server's slot actions over HTTP (POST /slots/{id}?action=save|restore|erase): a
completion's cached prompt saved into --slot-save-path, the server restarted, the state restored, and the
same request then reuses the prompt (usage.prompt_tokens_details.cached_tokens) and returns the same text
at temperature 0. Filenames that could leave the folder, unknown actions, a corrupt file and a server
without the folder are refused with named errors. The engine-level contract is in test_server_engine.c.
"""
import requests

PROMPT = "Once upon a time, there was a little girl named Lily."


def complete(server):
    r = requests.post(server.v1 + "/completions", json={
        "model": "m", "prompt": PROMPT, "max_tokens": 12, "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def slot(server, action, body=None, slot_id=0):
    return requests.post(f"{server.base}/slots/{slot_id}?action={action}", json=body, timeout=60)


def test_a_saved_slot_survives_a_restart_and_is_reused(start_server, tmp_path):
    args = ["--slot-save-path", str(tmp_path)]
    first = start_server("slots-before", args=args)
    a = complete(first)
    r = slot(first, "save", {"filename": "story.bin"})
    assert r.status_code == 200, r.text
    saved = r.json()
    assert saved["id_slot"] == 0 and saved["filename"] == "story.bin"
    assert saved["n_saved"] > 10 and saved["n_written"] == (tmp_path / "story.bin").stat().st_size
    assert "save_ms" in saved["timings"]
    first.stop()
    first.check_clean_exit()

    second = start_server("slots-after", args=args)
    r = slot(second, "restore", {"filename": "story.bin"})
    assert r.status_code == 200, r.text
    assert r.json()["n_restored"] == saved["n_saved"] and r.json()["n_read"] == saved["n_written"]
    b = complete(second)
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == b["usage"]["prompt_tokens"] - 1
    assert b["choices"][0]["text"] == a["choices"][0]["text"]
    r = slot(second, "erase")
    assert r.status_code == 200 and r.json()["n_erased"] > 0, r.text

    (tmp_path / "corrupt.bin").write_bytes((tmp_path / "story.bin").read_bytes()[:100])
    r = slot(second, "restore", {"filename": "corrupt.bin"})
    assert r.status_code == 400 and "KV state" in r.json()["error"]["message"], r.text
    for name in ["../story.bin", "/etc/passwd", "..", ".hidden", "a/b", "", "x" * 129, "a\\b", 7]:
        r = slot(second, "save", {"filename": name})
        assert r.status_code == 400 and r.json()["error"]["param"] == "filename", (name, r.text)
    assert slot(second, "restore", {"filename": "missing.bin"}).status_code == 404
    assert slot(second, "save", {"filename": "x.bin"}, slot_id=3).status_code == 404  # an empty slot
    r = slot(second, "save", {"filename": "x.bin"}, slot_id=99)
    assert r.status_code == 400 and "outside" in r.json()["error"]["message"], r.text
    assert slot(second, "explode", {"filename": "x.bin"}).status_code == 400
    assert requests.post(second.base + "/slots/abc?action=save", json={}, timeout=10).status_code == 400
    assert not (tmp_path / "x.bin").exists()


def test_without_a_slot_folder_save_and_restore_are_not_supported(start_server):
    server = start_server("slots-none")
    r = slot(server, "save", {"filename": "a.bin"})
    assert r.status_code == 501 and "--slot-save-path" in r.json()["error"]["message"], r.text
