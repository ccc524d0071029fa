"""Models exported from PyTorch run by Kiln against onnxruntime's outputs stored beside them.

The models (tests/onnx/torch_models: an MLP, nn.TransformerEncoderLayer, transformers' GPT-2 with its LM head,
BERT and Llama, 2 layers each, hidden 32) were made once by hand with torch.onnx.export, both exporters
(`torchscript`: dynamo=False, opset 17; `dynamo`: dynamo=True, opset 18), by torch_models/make_models.py, which
also stored the inputs and onnxruntime 1.31.1's outputs at two (batch, seq) shapes, (1, 5) and (3, 8), in
NAME-EXPORTER.npz. torch never runs here: this test reads the committed files only.

For each model and exporter, Kiln either
- runs it: both shapes, then the first again, within the tolerance below of onnxruntime's outputs, with
  exactly two compiles for the three runs (a dynamic batch and sequence do not compile per call); or
- refuses it with exactly the named error listed in REFUSED (the stage, status and message Kiln gives today).
  That list is the lowering's to-do list (docs/onnx.md, "Models exported from PyTorch"): when the lowering
  learns an operator, the refusal changes and this test fails until the entry is moved to RUNS. Nothing is
  skipped.

Tolerance, derived as in test_onnx_run.py: a float32 dot product of K terms summed in another order than
onnxruntime's differs by about eps32 * sqrt(K) (eps32 = 6e-8) relative to its terms' magnitude; each residual
block chains a few such products through libm functions a few ulps apart and a normalization that can scale
an error up by the inverse of a row's spread. So rtol = atol = 1e-5 * sqrt(K) * depth, with K the largest
inner dimension (64, the feed-forward width, for every model here) and depth the number of residual sublayers
between input and output (attention and feed-forward each count; the MLP and the LM head count as one): an order above the expected error, orders below
what a wrong index or a dropped term gives.
"""
import json
import math
import pathlib

import numpy as np
import pytest

import kiln_onnx_run as kr
import kiln_onnx_view as kv
import test_onnx_run

HERE = pathlib.Path(__file__).resolve().parent / "torch_models"
MANIFEST = json.loads((HERE / "models.json").read_text())

# model -> (K, depth): the largest inner dimension and the number of residual sublayers (see the top).
SIZES = {"mlp": (64, 1), "encoder": (64, 2), "gpt2": (64, 5), "bert": (64, 4), "llama": (64, 4)}

# (model, exporter) that Kiln runs today within tolerance: every exported file.
RUNS = {("mlp", "torchscript"), ("mlp", "dynamo"), ("encoder", "dynamo"), ("gpt2", "torchscript"), ("gpt2", "dynamo"),
        ("bert", "torchscript"), ("bert", "dynamo"), ("llama", "torchscript"), ("llama", "dynamo")}

# (model, exporter) -> (stage, status, message): what Kiln says today of each model it does not run (none now;
# a model that stops running fails the test with its message, to be fixed or listed here).
# stage "session" = kiln_onnx_load_memory + kiln_onnx_session_create (the reader's operator table, the inputs'
# types), "run" = the first kiln_onnx_session_run (where a plan is lowered and compiled).
UNSUPPORTED = "KILN_E_UNSUPPORTED"
REFUSED = {}

# (model, exporter) whose export failed when make_models.py ran: no file; a phrase of the error in models.json.
# torch 2.15's TorchScript exporter writes the sequence length it traced (7) into a Reshape of
# nn.MultiheadAttention, so the file it writes fails in onnxruntime itself at any other sequence length.
NOT_EXPORTED = {("encoder", "torchscript"): "requested shape:{7,4,8}"}

def tol(model):
    k, depth = SIZES[model]
    return 1e-5 * math.sqrt(k) * depth


def not_lowered(entry):
    """The model's operators that Kiln's lowering does not run on tensors yet (test_onnx_run.RUNS is what it
    runs; Shape, Gather, Concat, Slice, Unsqueeze, Squeeze and Cast are evaluated on the host for shape
    vectors only): the to-do list beyond the first refusal, printed and in docs/onnx.md."""
    return sorted(set(entry["ops"]) - test_onnx_run.RUNS - {"Constant"})


def shape_data(data, i):
    feeds = {k.split(".", 1)[1]: data[k] for k in data.files if k.startswith(f"in{i}.")}
    want = {k.split(".", 1)[1]: data[k] for k in data.files if k.startswith(f"out{i}.")}
    return feeds, want


def outcome(stem, model):
    """("runs", max error) or ("refused", (stage, status, message)) or ("wrong", why)."""
    data = np.load(HERE / f"{stem}.npz")
    shapes = len(MANIFEST["shapes"])
    try:
        s = kr.Session((HERE / f"{stem}.onnx").read_bytes())
    except kv.KilnError as e:
        return "refused", ("session", e.status, e.message)
    with s:
        worst = 0.0
        for i in list(range(shapes)) + [0]:
            feeds, want = shape_data(data, i)
            try:
                got = dict(zip(s.outputs, s.run(feeds)))
            except kv.KilnError as e:
                return "refused", ("run", e.status, e.message)
            for name, ref in want.items():
                g = got[name]
                if g.shape != ref.shape or g.dtype != ref.dtype:
                    return "wrong", f"{name} at shape {i}: {g.dtype}{list(g.shape)}, onnxruntime {ref.dtype}{list(ref.shape)}"
                err = np.abs(g.astype(np.float64) - ref)
                worst = max(worst, float(err.max()))
                bad = err > tol(model) * (1 + np.abs(ref))
                if bad.any():
                    return "wrong", f"{name} at shape {i}: {int(bad.sum())} of {bad.size} beyond tol {tol(model):.2g}, max error {err.max():.3g}"
        if s.runs() != shapes + 1 or s.compiles() != shapes:
            return "wrong", f"{s.runs()} runs compiled {s.compiles()} plans, expected {shapes}"
    return "runs", worst


def test_models_exported_from_pytorch_run_within_tolerance_or_are_refused_by_name(capsys):
    unexpected, lines, n_run = [], [], 0
    for stem, entry in MANIFEST["files"].items():
        key = (entry["model"], entry["exporter"])
        if "error" in entry:
            lines.append(f"  {stem}: not exported ({entry['error']})")
            if key not in NOT_EXPORTED or NOT_EXPORTED[key] not in entry["error"]:
                unexpected.append(f"{stem}: export failed with {entry['error']!r}, NOT_EXPORTED says {NOT_EXPORTED.get(key)!r}")
            continue
        kind, what = outcome(stem, entry["model"])
        if kind == "runs":
            n_run += 1
            lines.append(f"  {stem}: runs, max error {what:.2g} (tol {tol(entry['model']):.2g})")
            if key not in RUNS:
                unexpected.append(f"{stem}: runs within tolerance now (max error {what:.2g}): move it to RUNS")
        elif kind == "refused":
            lines.append(f"  {stem}: refused at {what[0]}: {what[1]}: {what[2]}\n"
                         f"    operators not lowered yet: {' '.join(not_lowered(entry))}")
            if REFUSED.get(key) != what:
                unexpected.append(f"{stem}: refused with {what!r}, REFUSED says {REFUSED.get(key)!r}")
        else:
            lines.append(f"  {stem}: WRONG: {what}")
            unexpected.append(f"{stem}: {what}")
    n = sum("error" not in e for e in MANIFEST["files"].values())
    with capsys.disabled():
        print(f"\nmodels exported from PyTorch: {n_run} of {n} run within tolerance of onnxruntime; "
              f"{n - n_run} refused by name\n" + "\n".join(lines))
    assert not unexpected, "\n".join(unexpected)
    assert set(RUNS) | set(REFUSED) | set(NOT_EXPORTED) == {(e["model"], e["exporter"]) for e in MANIFEST["files"].values()}


# Kiln's own INT8 (kiln_onnx_session_params.weights = "q8_0"): MatMul/Gemm weights quantized at load, per output
# channel in blocks of 32, and the activations per block of 32 by the int8 kernels. Each rounding is within
# half a step of amax/127, an rms relative error of about 1/(127 * sqrt(12)) = 0.23% per operand, ~0.3% per
# dot product; over up to 5 residual sublayers (with attention and normalization amplifying it a few times)
# the output stays within ~2% relative (rms), i.e. a cosine above 0.9998. The bound, 0.999, allows a relative
# error of 4.5%: twice that, and far above what a wrong transpose or scale gives (a cosine near 0).
INT8_COSINE = 0.999


def test_kiln_int8_weights_stay_within_a_cosine_of_float_on_every_exported_model():
    lines = []
    for stem, entry in MANIFEST["files"].items():
        if "error" in entry:
            continue
        data = np.load(HERE / f"{stem}.npz")
        feeds, want = shape_data(data, 1)
        blob = (HERE / f"{stem}.onnx").read_bytes()
        with kr.Session(blob) as f, kr.Session(blob, weights="q8_0") as q:
            got_f, got_q = f.run(feeds), q.run(feeds)
        for name, a, b in zip(f.outputs, got_f, got_q):
            a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
            cos = float(a64 @ b64 / np.linalg.norm(a64) / np.linalg.norm(b64))
            ref = want[name].astype(np.float64).ravel()
            cos_ort = float(ref @ b64 / np.linalg.norm(ref) / np.linalg.norm(b64))
            lines.append(f"  {stem}: cosine {cos:.6f} to Kiln's float, {cos_ort:.6f} to onnxruntime's; max error "
                         f"{np.abs(a64 - b64).max() / np.abs(a64).max():.3g} of the output's scale")
            assert not np.array_equal(a64, b64), f"{stem}: q8_0 gave the float result (nothing quantized)"
            assert cos >= INT8_COSINE and cos_ort >= INT8_COSINE, lines[-1]
    print("\nKiln's INT8 weights (q8_0) against float:\n" + "\n".join(lines))


def test_an_unknown_weights_setting_is_refused_by_name():
    with pytest.raises(kv.KilnError, match=r"weights 'int4': give \"float\" or \"q8_0\""):
        kr.Session((HERE / "mlp-dynamo.onnx").read_bytes(), weights="int4")


def test_every_exported_model_runs_with_the_vulkan_backend_in_the_engine():
    """devices = "vulkan" (docs/vulkan.md: the first Vulkan device ahead of the CPU, dropped with a note when
    there is none): the scheduler splits each graph between the device (what it supports) and the CPU (the
    rest: where, reduce_max, the new unary functions, gathers), and the outputs stay within the float
    tolerance of onnxruntime. On this project's machines the device is Mesa's lavapipe."""
    for stem, entry in MANIFEST["files"].items():
        if "error" in entry:
            continue
        data = np.load(HERE / f"{stem}.npz")
        feeds, want = shape_data(data, 1)
        with kr.Session((HERE / f"{stem}.onnx").read_bytes(), devices="vulkan") as s:
            for name, got in zip(s.outputs, s.run(feeds)):
                ref = want[name]
                assert got.shape == ref.shape
                err = np.abs(got.astype(np.float64) - ref)
                assert (err <= tol(entry["model"]) * (1 + np.abs(ref))).all(), f"{stem}: max error {err.max():.3g}"


def test_exported_attention_becomes_one_fused_node_per_batch_row_and_layer(kiln_cli):
    """GPT-2 and BERT, both exporters: the exported chain (Transpose, MatMul, scale, mask add, Softmax,
    MatMul, Transpose) lowers to Kiln's fused attention (onnx_attention.c), one node per batch row and layer,
    and no softmax is left; the outputs' agreement with onnxruntime is the first test's."""
    import subprocess

    for stem in ("gpt2-torchscript", "gpt2-dynamo", "bert-torchscript", "bert-dynamo"):
        r = subprocess.run([kiln_cli, "onnx", "inspect", "--after", "--dims", "batch=3,seq=8",
                            str(HERE / f"{stem}.onnx")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        ops = [line.split()[2] for line in r.stdout.splitlines() if line.startswith("#")]
        assert ops.count("attention") == 3 * 2 and "softmax" not in ops, (stem, ops.count("attention"))
