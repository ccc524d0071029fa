"""Errors: each kiln_status becomes its KilnError subclass, carrying kiln_last_error()'s message and the
status name; bad arguments are refused with a message that names them."""

from __future__ import annotations

import pytest

import kiln
from kiln import _lib
from kiln.errors import ERROR_CLASSES


def test_every_status_has_a_class_named_as_the_library_names_it():
    for status in range(-1, -11, -1):
        assert ERROR_CLASSES[status].status_name == _lib.status_name(status)
        assert issubclass(ERROR_CLASSES[status], kiln.KilnError)


def test_a_missing_model_file_raises_an_io_error_naming_it(tmp_path):
    path = tmp_path / "no-such-model.gguf"
    with pytest.raises(kiln.KilnIOError) as e:
        kiln.Llama(str(path), verbose=False)
    assert isinstance(e.value, kiln.KilnError) and isinstance(e.value, OSError)
    assert str(path) in e.value.message and e.value.status_name == "KILN_E_IO" and e.value.status == -3
    assert "KILN_E_IO" in str(e.value)


def test_a_malformed_file_raises_a_format_error(tmp_path):
    path = tmp_path / "garbage.gguf"
    path.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + b"\xff" * 60)  # version 3, absurd counts
    with pytest.raises(kiln.FormatError) as e:
        kiln.Model(path)
    assert str(path) in e.value.message and e.value.status_name == "KILN_E_FORMAT"


def test_bad_context_arguments_are_named(llm):
    with pytest.raises(kiln.InvalidArgumentError, match="n_seq_max"):
        kiln.Context(llm.model, n_seq_max=1000)
    with pytest.raises(ValueError, match="kv_type"):
        kiln.Context(llm.model, kv_type="q4")


def test_a_token_outside_the_vocabulary_is_refused_and_changes_nothing(llm):
    with llm.model.context(n_ctx=64) as ctx:
        ctx.decode([1, 2])
        with pytest.raises(kiln.InvalidArgumentError, match="99999"):
            ctx.decode([99999])
        assert ctx.n_past == 2


def test_a_full_context_raises_context_full(llm):
    with llm.model.context(n_ctx=8) as ctx:
        with pytest.raises(kiln.ContextFullError):
            ctx.decode([1] + [300] * 10)
        assert ctx.n_past == 0


def test_a_full_batch_raises_range_error():
    with kiln.Batch(2) as b:
        b.add(1, 0)
        b.add(2, 1)
        with pytest.raises(kiln.RangeError):
            b.add(3, 2)


def test_closed_objects_refuse_use(model_path):
    m = kiln.Model(model_path)
    ctx = m.context(n_ctx=16)
    m.close()  # closes the context first
    with pytest.raises(ValueError, match="closed"):
        ctx.decode([1])
    with pytest.raises(ValueError, match="closed"):
        m.n_vocab
    llama = kiln.Llama(model_path, verbose=False)
    llama.close()
    llama.close()
    with pytest.raises(ValueError, match="closed"):
        llama.n_ctx()


def test_the_abort_callback_stops_a_decode(llm):
    with llm.model.context(n_ctx=64, abort=lambda: True) as ctx:
        with pytest.raises(kiln.AbortedError):
            ctx.decode([1, 2, 3])
        assert ctx.n_past == 0


def test_ignored_llama_cpp_arguments_warn_only_when_verbose(model_path, recwarn):
    kiln.Llama(model_path, use_mmap=True, flash_attn=True, verbose=False).close()
    assert not recwarn.list
    with pytest.warns(UserWarning, match="use_mmap"):
        kiln.Llama(model_path, use_mmap=True, verbose=True).close()
