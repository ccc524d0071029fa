"""The drop-in promise: a script written for llama-cpp-python runs unchanged under Kiln once its import
line is switched from `import llama_cpp` to `import kiln as llama_cpp`."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import kiln

SCRIPT = textwrap.dedent(
    '''
    import sys
    import llama_cpp

    llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, n_gpu_layers=-1, seed=42,
                          verbose=False)
    out = llm("Once upon a time", max_tokens=16, temperature=0.0, stop=["\\n"], echo=False)
    print("TEXT", repr(out["choices"][0]["text"]), out["choices"][0]["finish_reason"],
          out["usage"]["completion_tokens"])

    streamed = ""
    for chunk in llm.create_completion("Once upon a time", max_tokens=16, temperature=0.0, stream=True):
        streamed += chunk["choices"][0]["text"]
    print("SAME", streamed == out["choices"][0]["text"])

    reply = llm.create_chat_completion(
        messages=[{"role": "system", "content": "You are a storyteller."},
                  {"role": "user", "content": "Tell me a story."}],
        max_tokens=8, temperature=0.7, seed=3)
    print("CHAT", reply["choices"][0]["message"]["role"], type(reply["choices"][0]["message"]["content"]).__name__)

    pieces = []
    for chunk in llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}], max_tokens=8, stream=True):
        delta = chunk["choices"][0]["delta"]
        if "content" in delta:
            pieces.append(delta["content"])
    print("CHUNKS", len(pieces) > 0)

    tokens = llm.tokenize(b"Hello, world!")
    print("ROUNDTRIP", llm.detokenize(tokens) == b"Hello, world!", llm.n_ctx(), llm.n_vocab())
    llm.reset()
    llm.close()
    '''
)


def test_a_llama_cpp_python_script_runs_with_kiln_aliased(tmp_path, model_path):
    script = tmp_path / "story.py"
    script.write_text(SCRIPT.replace("import llama_cpp\n", "import kiln as llama_cpp\n", 1))
    done = subprocess.run([sys.executable, str(script), model_path], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    with kiln.Llama(model_path, n_ctx=256, verbose=False) as llm:
        want = llm("Once upon a time", max_tokens=16, temperature=0.0, stop=["\n"])
    c = want["choices"][0]
    assert lines[0] == f"TEXT {c['text']!r} {c['finish_reason']} {want['usage']['completion_tokens']}"
    assert lines[1:] == ["SAME True", "CHAT assistant str", "CHUNKS True", "ROUNDTRIP True 256 512"]
    assert done.stderr == b""  # verbose=False: nothing on stderr


def test_n_gpu_layers_puts_the_last_layers_on_the_device_and_keeps_the_greedy_text(model_path):
    """llama-cpp-python's n_gpu_layers maps to kiln_model_params.gpu_layers: the last N layers on the named
    device (lavapipe on a machine without a GPU), the rest on the CPU, the same greedy text as the CPU."""
    cpu = kiln.Llama(model_path, verbose=False, seed=1)
    assert cpu._model.backends == "cpu"
    want = cpu("Once upon a time", max_tokens=24, temperature=0.0)["choices"][0]["text"]
    cpu.close()
    for n in (2, -1):
        llm = kiln.Llama(model_path, verbose=False, seed=1, n_gpu_layers=n, devices="vulkan")
        got = llm("Once upon a time", max_tokens=24, temperature=0.0)["choices"][0]["text"]
        if not llm._model.backends.startswith("vulkan"):  # built without Vulkan, or no device: the CPU
            llm.close()
            pytest.skip(f"no Vulkan device ({llm._model.backends})")
        llm.close()
        assert got == want, (n, got, want)
