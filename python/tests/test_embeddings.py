"""Sentence embeddings with all-MiniLM-L6-v2 (F32 GGUF from scripts/get-minilm.sh; skipped without it):
Llama.embed and create_embedding give exactly the floats of `kiln embed --json`, with
llama-cpp-python's shapes."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from conftest import run_cli

TEXTS = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e \u2014 na\u00efve r\u00e9sum\u00e9",
    "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002",
    "?",
]


@pytest.fixture(scope="module")
def encoder(minilm_path):
    with kiln.Llama(minilm_path, embedding=True, verbose=False) as llama:
        yield llama


def _cli_embeddings(cli, minilm_path, texts):
    out = run_cli(cli, ["embed", "-m", minilm_path, "--json"] + texts)
    return np.array(json.loads(out), dtype=np.float32)


def test_embed_is_bit_identical_to_kiln_embed(encoder, cli, minilm_path):
    want = _cli_embeddings(cli, minilm_path, TEXTS)
    got = np.array(encoder.embed(TEXTS), dtype=np.float32)
    assert got.shape == (len(TEXTS), 384)
    assert np.array_equal(got, want)


def test_one_text_gives_one_vector_equal_to_kiln_embed(encoder, cli, minilm_path):
    want = _cli_embeddings(cli, minilm_path, [TEXTS[0]])[0]
    got = encoder.embed(TEXTS[0])
    assert isinstance(got, list) and isinstance(got[0], float)
    assert np.array_equal(np.array(got, dtype=np.float32), want)
    assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-5


def test_create_embedding_has_the_openai_shape(encoder):
    out = encoder.create_embedding(TEXTS[:2])
    assert set(out) == {"object", "data", "model", "usage"}
    assert out["object"] == "list" and out["model"] == encoder.model_path
    assert [d["index"] for d in out["data"]] == [0, 1]
    assert all(d["object"] == "embedding" and len(d["embedding"]) == encoder.n_embd() for d in out["data"])
    n = sum(len(encoder.tokenize(t.encode())) for t in TEXTS[:2])
    assert out["usage"] == {"prompt_tokens": n, "total_tokens": n}
    assert encoder.create_embedding("x", model="m")["model"] == "m"


def test_wordpiece_tokenize_adds_cls_and_sep(encoder):
    ids = encoder.tokenize(b"hello world")
    assert ids[0] == encoder.token_bos() and ids[-1] == encoder.token_eos() and len(ids) == 4
    assert encoder.detokenize(ids) == b"hello world"


def test_long_texts_are_cut_keeping_sep(encoder):
    long = "word " * 2000
    vec, n = encoder.embed(long, return_count=True)
    assert n == encoder.n_ctx() and len(vec) == 384
    with pytest.raises(ValueError, match="exceed batch size"):
        encoder.embed(long, truncate=False)


def test_an_encoder_cannot_generate_and_a_decoder_cannot_embed(encoder, model_path):
    with pytest.raises(RuntimeError, match="embeddings"):
        encoder("hello", max_tokens=2)
    with pytest.raises(kiln.UnsupportedError):
        kiln.Llama(model_path, embedding=True, verbose=False)


def test_embed_needs_embedding_mode(llm):
    with pytest.raises(RuntimeError, match="embedding=True"):
        llm.embed("hello")


def test_low_level_embeddings_are_views_valid_until_the_next_decode(minilm_path):
    with kiln.Model(minilm_path) as m, m.context(embeddings=True, n_seq_max=2) as ctx, kiln.Batch(64) as b:
        a, c = m.tokenize("first") + [m.eos], m.tokenize("second") + [m.eos]
        b.add_sequence(a, seq_id=0, logits="none")
        b.add_sequence(c, seq_id=1, logits="none")
        ctx.decode_batch(b)
        e0 = ctx.embeddings(0)
        assert e0.shape == (384,) and e0.dtype == np.float32 and not e0.flags.writeable
        assert not e0.flags.owndata
        kept = e0.copy()
        assert not np.array_equal(kept, ctx.embeddings(1))
        assert ctx.kv_n_used() == 0  # an encoder keeps nothing between batches
        with pytest.raises(kiln.InvalidArgumentError):
            ctx.logits()
