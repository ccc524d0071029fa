"""
Speculative decoding in `kiln serve`, by prompt lookup (`--lookup --draft-max 8`) and by a draft model
(`--model-draft`, a Q4_0 copy of the model made by `kiln quantize`): greedy answers do not change. Requests
whose prompts repeat themselves (so their choices guess a lot) and requests that do not are sent at once
and share the engine's batches; each answer equals what `kiln run --temp 0` prints for its prompt alone,
plain and streamed, and with the official openai client. A sampled request gets a sampled answer of the
asked length (the distribution itself is tested in tests/test_spec.c). After the requests the server's
cache holds no guessed cell (kv cells in use drop back to what the prefix cache keeps), and /metrics counts
the guesses verified and kept; with a draft model the draft's cache is empty again too.
"""
import subprocess
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from conftest import KILN_BIN, MODEL, kiln_run

REPEAT = "Lily was sad and didn't know what to do. Lily was sad and didn't know what to do. Lily was sad"
PROMPTS = [REPEAT, "The cat", REPEAT + " and", "One day, a little bird", REPEAT + ". She", "Mia had a red ball"]
N = 48


@pytest.fixture(scope="module")
def draft_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("draft") / "draft-q4_0.gguf"
    subprocess.run([KILN_BIN, "quantize", MODEL, str(path), "Q4_0"], check=True, capture_output=True, timeout=120)
    return path


@pytest.fixture(scope="module", params=["lookup", "draft"])
def spec_server(request, start_server, draft_path):
    drafter = ("--lookup",) if request.param == "lookup" else ("--model-draft", str(draft_path))
    return start_server(request.param, args=(*drafter, "--draft-max", "8", "-np", "4"))


@pytest.fixture(scope="module")
def spec_client(spec_server):
    return openai.OpenAI(base_url=spec_server.v1, api_key="no-key", timeout=60, max_retries=0)


@pytest.fixture(scope="module")
def references():
    return {p: kiln_run(p, N) for p in PROMPTS}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_concurrent_greedy_requests_with_lookup_match_kiln_run_alone(spec_server, spec_client, references, stream):
    model_id = spec_client.models.list().data[0].id
    before = spec_server.metrics()

    def one(prompt):
        if not stream:
            return spec_client.completions.create(model=model_id, prompt=prompt, max_tokens=N,
                                                  temperature=0).choices[0].text
        chunks = spec_client.completions.create(model=model_id, prompt=prompt, max_tokens=N, temperature=0,
                                                stream=True)
        return "".join(ch.choices[0].text for ch in chunks if ch.choices)

    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        got = dict(zip(PROMPTS, pool.map(one, PROMPTS)))
    for prompt in PROMPTS:
        assert got[prompt] == references[prompt], f"prompt {prompt!r}"
    # lookup: the repeating prompts always find an n-gram to guess from; a guess starts out trusted
    after = spec_server.metrics()
    drafted = after["kiln_speculative_drafted_tokens_total"] - before["kiln_speculative_drafted_tokens_total"]
    accepted = after["kiln_speculative_accepted_tokens_total"] - before["kiln_speculative_accepted_tokens_total"]
    assert drafted > 0 and 0 <= accepted <= drafted, (drafted, accepted)
    generated = after["kiln_generated_tokens_total"] - before["kiln_generated_tokens_total"]
    assert accepted < generated <= N * len(PROMPTS), (accepted, generated)  # a kept guess is a generated token
    assert after["kiln_draft_kv_cells_used"] == 0  # every choice has ended: the draft holds nothing


def test_a_sampled_request_with_lookup_gives_its_length(spec_client):
    model_id = spec_client.models.list().data[0].id
    r = spec_client.completions.create(model=model_id, prompt=REPEAT, max_tokens=N, temperature=0.8, seed=3)
    assert r.usage.completion_tokens <= N and r.choices[0].text
    if r.choices[0].finish_reason == "length":
        assert r.usage.completion_tokens == N
