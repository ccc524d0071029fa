"""
Batching does not change answers: six greedy (temperature 0) requests sent at once, batched together by
the engine, each return exactly what `kiln run -p PROMPT -n N --temp 0` prints for that prompt alone (its
stdout minus the prompt). /v1/completions tokenizes the prompt as `kiln run` does, with BOS, so the two
see the same tokens. Sent a second time the prompts hit the prefix cache, and the answers do not change.
"""
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import KILN_BIN, MODEL, kiln_run

PROMPTS = [
    "Once upon a time",
    "The cat",
    "Tom and Lily went to the park",
    "One day, a little bird",
    "The sun was hot",
    "Mia had a red ball",
]
N = 48


@pytest.fixture(scope="module")
def references():
    return {p: kiln_run(p, N) for p in PROMPTS}


def complete_all(client, model_id, stream):
    def one(prompt):
        if not stream:
            r = client.completions.create(model=model_id, prompt=prompt, max_tokens=N, temperature=0)
            return r.choices[0].text
        chunks = client.completions.create(model=model_id, prompt=prompt, max_tokens=N, temperature=0,
                                           stream=True)
        return "".join(ch.choices[0].text for ch in chunks if ch.choices)

    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        return dict(zip(PROMPTS, pool.map(one, PROMPTS)))


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_concurrent_greedy_requests_match_kiln_run_alone(client, model_id, references, stream):
    got = complete_all(client, model_id, stream)
    for prompt in PROMPTS:
        assert got[prompt] == references[prompt], f"prompt {prompt!r}"


def test_prompt_tokens_count_bos_as_kiln_tokenize_does(client, model_id):
    for prompt in PROMPTS[:2]:
        ids = subprocess.run([KILN_BIN, "tokenize", "-m", MODEL, "--ids", prompt], capture_output=True,
                             text=True, timeout=30, check=True).stdout.split()
        r = client.completions.create(model=model_id, prompt=prompt, max_tokens=1, temperature=0)
        assert r.usage.prompt_tokens == len(ids)
