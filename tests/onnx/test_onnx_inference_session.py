"""kiln.InferenceSession (python/kiln/onnx.py) in onnxruntime's script pattern: the same script, run once with
`import onnxruntime as rt` and once with `import kiln as rt`, gives the same outputs (the tolerance of
test_onnx_run.py), and the session describes its inputs and outputs as onnxruntime does. The kiln package is
imported from the source tree (python/) with KILN_LIBRARY pointing at the build's libkiln.so."""
import os
import pathlib
import sys

import numpy as np
import onnx
import onnxruntime
import pytest

from test_onnx_run import encoder, mlp, tol

os.environ.setdefault("KILN_LIBRARY", os.environ["KILN_LIB"])
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import kiln  # noqa: E402


def script(rt, path, x):
    """onnxruntime's documented pattern, word for word apart from the module."""
    sess = rt.InferenceSession(path, providers=["CPUExecutionProvider"])
    input_name = sess.get_inputs()[0].name
    return sess.run(None, {input_name: x})


@pytest.mark.parametrize("make, shape, k", [(lambda: mlp(17), (4, 16), 64), (encoder, (2, 3, 16), 16)])
def test_an_onnxruntime_script_runs_with_kiln_in_its_place(tmp_path, make, shape, k):
    path = str(tmp_path / "model.onnx")
    onnx.save(make(), path)
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    ref = script(onnxruntime, path, x)
    got = script(kiln, path, x)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=tol(k), atol=tol(k))


def test_inputs_and_outputs_are_described_as_onnxruntime_does(tmp_path):
    path = str(tmp_path / "model.onnx")
    onnx.save(encoder(), path)
    ref = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    with kiln.InferenceSession(path) as sess:
        for mine, theirs in ((sess.get_inputs(), ref.get_inputs()), (sess.get_outputs(), ref.get_outputs())):
            assert [(a.name, a.shape, a.type) for a in mine] == [(a.name, a.shape, a.type) for a in theirs]
        x = np.ones((1, 2, 16), np.float32)
        (y,) = sess.run(["y"], {"x": x})
        np.testing.assert_allclose(y, ref.run(["y"], {"x": x})[0], rtol=tol(16), atol=tol(16))
        with pytest.raises(kiln.InvalidArgumentError, match="output 'z' is not one the model has"):
            sess.run(["z"], {"x": x})
        with pytest.raises(kiln.InvalidArgumentError, match="input 'x': type double given, the model takes float"):
            sess.run(None, {"x": x.astype(np.float64)})
    sess2 = kiln.InferenceSession(onnx.load(path).SerializeToString())
    assert sess2.get_providers() == ["CPUExecutionProvider"]


def hf_script(rt, path, input_ids, attention_mask):
    """The pattern of an exported Hugging Face model: int64 ids and mask fed by name."""
    sess = rt.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})


@pytest.mark.parametrize("stem", ["gpt2-torchscript", "bert-dynamo"])
def test_an_exported_hugging_face_model_runs_in_the_same_script(stem):
    """GPT-2 and BERT exported by torch.onnx (tests/onnx/torch_models), fed int64 ids and a padding mask,
    give onnxruntime's outputs within test_onnx_torch_models.py's tolerance for their depth."""
    path = str(pathlib.Path(__file__).resolve().parent / "torch_models" / f"{stem}.onnx")
    rng = np.random.default_rng(9)
    ids = rng.integers(0, 96, (2, 6), dtype=np.int64)
    mask = np.ones((2, 6), np.int64)
    mask[1, 4:] = 0
    ref = hf_script(onnxruntime, path, ids, mask)
    got = hf_script(kiln, path, ids, mask)
    t = tol(64) * (5 if stem.startswith("gpt2") else 4)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=t, atol=t)
