"""Kiln's own lower layer: Model, Context, Batch, Sampler and the KV-cache calls, with logits as numpy
views of the library's buffer."""

from __future__ import annotations

import numpy as np
import pytest

import kiln


@pytest.fixture(scope="module")
def model(model_path):
    with kiln.Model(model_path, n_threads=1) as m:
        yield m


def test_model_facts(model):
    assert model.arch == "llama" and model.n_vocab == 512 and model.is_causal
    assert model.n_threads == 1 and model.weight_bytes > 0 and model.pooling == "none"
    assert model.metadata()["general.architecture"] == "llama"


def test_logits_are_a_read_only_view_without_a_copy(model):
    with model.context(n_ctx=64) as ctx:
        logits = ctx.decode(model.tokenize("Once upon a time"))
        assert logits.shape == (model.n_vocab,) and logits.dtype == np.float32
        assert not logits.flags.owndata and not logits.flags.writeable
        again = ctx.logits(-1)
        assert again.ctypes.data == logits.ctypes.data  # the same memory, twice


def test_greedy_sampler_is_the_argmax(model):
    with model.context(n_ctx=64) as ctx, kiln.Sampler(model.n_vocab, temperature=0) as s:
        logits = ctx.decode(model.tokenize("Once upon a time"))
        assert s.sample(logits) == int(np.argmax(logits))
        with pytest.raises(ValueError, match="512 floats"):
            s.sample(np.zeros(3, dtype=np.float32))


def test_batches_of_two_sequences_match_each_alone(model):
    a, b = model.tokenize("Once upon a time"), model.tokenize("The cat sat")
    with model.context(n_ctx=64, n_seq_max=2) as ctx, kiln.Batch(16) as batch:
        batch.add_sequence(a, seq_id=0)
        batch.add_sequence(b, seq_id=1)
        assert len(batch) == len(a) + len(b)
        ctx.decode_batch(batch)
        la, lb = ctx.logits(len(a) - 1).copy(), ctx.logits(-1).copy()  # batch index; -1: the last row
        assert ctx.kv_seq_pos_max(0) == len(a) - 1 and ctx.kv_seq_pos_max(1) == len(b) - 1
    with model.context(n_ctx=64) as alone:
        np.testing.assert_allclose(alone.decode(a), la, atol=1e-4)
        alone.reset()
        np.testing.assert_allclose(alone.decode(b), lb, atol=1e-4)


def test_kv_cache_calls(model):
    prompt = model.tokenize("Once upon a time")
    with model.context(n_ctx=64, n_seq_max=3) as ctx:
        ctx.decode(prompt)
        used = ctx.kv_n_used()
        ctx.kv_seq_cp(0, 1)  # shares cells, copies nothing
        assert ctx.kv_n_used() == used and ctx.kv_seq_pos_max(1) == len(prompt) - 1
        ctx.kv_seq_rm(0, 2)
        assert ctx.kv_seq_pos_max(0) == 1 and ctx.n_past == 2
        assert ctx.kv_n_used() == used  # still held by sequence 1
        ctx.kv_seq_keep(1)
        assert ctx.kv_seq_pos_max(0) == -1 and ctx.kv_seq_pos_max(2) == -1
        with pytest.raises(kiln.InvalidArgumentError):
            ctx.kv_seq_rm(5)


def test_kv_types(model):
    for kv in ("f32", "f16", "q8_0"):
        try:
            ctx = model.context(n_ctx=32, kv_type=kv)
        except kiln.InvalidArgumentError:
            assert kv == "q8_0"  # needs Hkv * head size to be a multiple of 32
            continue
        with ctx:
            assert ctx.decode([1]).shape == (model.n_vocab,)


def test_the_log_callback_receives_runtime_lines(model):
    lines = []
    with model.context(n_ctx=32, log=lines.append) as ctx:
        ctx.decode([1, 2])
    assert lines and all(isinstance(x, str) for x in lines)


def test_the_cpu_level_can_be_forced_and_restored(model):
    """kiln.set_cpu_level: the scalar reference level on any machine, then the best one again; an unknown
    name is refused by name. Greedy tokens are the same at both levels for this model."""
    best = kiln.set_cpu_level(None)
    ctx = model.context(n_ctx=64)
    ids = model.tokenize("Once upon a time")
    greedy = []
    try:
        for level in ("ref", None):
            assert kiln.set_cpu_level(level) == ("ref" if level else best)
            assert kiln.cpu_level() == ("ref" if level else best)
            ctx.reset()
            greedy.append(int(np.argmax(ctx.decode(ids))))
        with pytest.raises(kiln.InvalidArgumentError, match="avx9"):
            kiln.set_cpu_level("avx9")
    finally:
        kiln.set_cpu_level(None)
    assert greedy[0] == greedy[1]
