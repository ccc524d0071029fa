"""
/v1/embeddings through the official `openai` client on the real all-MiniLM-L6-v2 (KILN_MINILM, converted
by the embed_model_setup fixture of tests/embed.cmake), against sentence-transformers' vectors in
tests/data/embed/minilm_ref.json at test_embed's F32 tolerance (cosine >= 0.9999): texts, token arrays,
float and base64 encodings (the client asks for base64 unless told otherwise), usage.prompt_tokens as
the Hugging Face tokenizer counts; `dimensions` other than the model's width and an input beyond the
context are refused by name; the encoder answers chat and completions with a clear 400, and the decoder
answers embeddings with one.
"""
import json
import math
import os
from pathlib import Path

import openai
import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
MINILM = os.environ.get("KILN_MINILM", str(ROOT / "build" / "minilm" / "minilm-f32.gguf"))
REFS = json.loads((ROOT / "tests" / "data" / "embed" / "minilm_ref.json").read_text())["sentences"]


@pytest.fixture(scope="module")
def embed_server(start_server):
    if not Path(MINILM).exists():
        pytest.fail(f"{MINILM} is missing: the embed_model_setup fixture converts it")
    return start_server("minilm", model=MINILM, threads=2)


@pytest.fixture(scope="module")
def eclient(embed_server):
    return openai.OpenAI(base_url=embed_server.v1, api_key="no-key", timeout=120, max_retries=0)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_texts_match_sentence_transformers_in_order(eclient):
    # Every reference but the one sentence-transformers cut at 256 tokens (sent below as its ids).
    refs = [r for r in REFS if len(r["ids"]) < 256]
    r = eclient.embeddings.create(model="minilm", input=[x["text"] for x in refs], encoding_format="float")
    assert r.object == "list" and r.model == Path(MINILM).name
    assert [d.index for d in r.data] == list(range(len(refs)))
    for d, ref in zip(r.data, refs):
        assert d.object == "embedding" and len(d.embedding) == 384
        assert cosine(d.embedding, ref["embedding"]) >= 0.9999, ref["text"]
    assert r.usage.prompt_tokens == sum(len(x["ids"]) for x in refs)
    assert r.usage.total_tokens == r.usage.prompt_tokens


def test_base64_token_arrays_and_a_lone_string(eclient):
    # The client's default encoding is base64, which it decodes to floats itself.
    r = eclient.embeddings.create(model="minilm", input=[REFS[4]["ids"], REFS[1]["ids"]])
    assert cosine(r.data[0].embedding, REFS[4]["embedding"]) >= 0.9999
    assert cosine(r.data[1].embedding, REFS[1]["embedding"]) >= 0.9999
    assert r.usage.prompt_tokens == len(REFS[4]["ids"]) + len(REFS[1]["ids"])
    one = eclient.embeddings.create(model="minilm", input=REFS[1]["text"], encoding_format="float")
    assert len(one.data) == 1
    assert max(abs(x - y) for x, y in zip(one.data[0].embedding, r.data[1].embedding)) < 1e-6


@pytest.mark.heavy  # 256 tokens take half a minute in the ASan build
def test_the_sentence_cut_at_256_tokens_as_its_ids(eclient):
    long_ref = next(r for r in REFS if len(r["ids"]) == 256)
    r = eclient.embeddings.create(model="minilm", input=long_ref["ids"], encoding_format="float")
    assert cosine(r.data[0].embedding, long_ref["embedding"]) >= 0.9999
    assert r.usage.prompt_tokens == 256


def test_dimensions_and_overlong_inputs_are_refused_by_name(eclient):
    with pytest.raises(openai.BadRequestError) as e:
        eclient.embeddings.create(model="minilm", input="hi", dimensions=128)
    assert e.value.status_code == 400 and e.value.body["param"] == "dimensions"
    assert "384" in e.value.body["message"]
    assert eclient.embeddings.create(model="minilm", input="hi", dimensions=384).data[0].embedding
    with pytest.raises(openai.BadRequestError) as e:
        eclient.embeddings.create(model="minilm", input="word " * 600)
    assert e.value.body["code"] == "context_length_exceeded" and e.value.body["param"] == "input"


def test_an_encoder_refuses_chat_and_completions(eclient):
    with pytest.raises(openai.BadRequestError) as e:
        eclient.chat.completions.create(model="minilm", messages=[{"role": "user", "content": "Hi"}])
    assert e.value.body["code"] == "model_not_generative"
    with pytest.raises(openai.BadRequestError) as e:
        eclient.completions.create(model="minilm", prompt="Hi")
    assert e.value.body["code"] == "model_not_generative"


def test_a_decoder_refuses_embeddings(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="x", input="hello")
    assert e.value.body["code"] == "model_not_embedding"


def test_concurrent_requests_share_batches(embed_server):
    # Eight requests at once: each answered with its own vectors.
    import concurrent.futures as cf
    before = embed_server.metrics()
    url = embed_server.v1 + "/embeddings"

    def one(i):
        body = {"input": [REFS[i]["text"], REFS[i + 1]["text"]], "encoding_format": "float"}
        return i, requests.post(url, json=body, timeout=120).json()

    with cf.ThreadPoolExecutor(8) as ex:
        for i, r in ex.map(one, range(8)):
            assert cosine(r["data"][0]["embedding"], REFS[i]["embedding"]) >= 0.9999
            assert cosine(r["data"][1]["embedding"], REFS[i + 1]["embedding"]) >= 0.9999
    after = embed_server.metrics()
    assert after['kiln_requests_total{status="ok"}'] - before['kiln_requests_total{status="ok"}'] == 8
