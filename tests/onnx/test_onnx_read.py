"""What Kiln reads from an ONNX file is what the onnx package reads from it: opset, IR version, producer,
the fed inputs and the outputs (names, element types, shapes with symbolic dims by name), every initializer
bit-exact (inline in raw_data, in each typed field, or in an external data file), every node with its
attributes, and the shape of every value as onnx's own shape inference finds it. Models are made here with
onnx.helper; the reference is onnx 1.23.2 (tests/onnx/requirements.txt)."""
import json
import subprocess

import onnx
import pytest

import kiln_onnx_view as kv
import models


def check_dims(name, kiln, ref):
    """Where onnx knows a dimension (a number or a symbol), Kiln knows the same; Kiln may know more."""
    if ref is None:
        return
    assert kiln is not None, f"{name}: Kiln lost the rank ({ref})"
    assert len(kiln) == len(ref), f"{name}: rank {len(kiln)} vs onnx {len(ref)}"
    for d, (k, r) in enumerate(zip(kiln, ref)):
        if r is not None:
            assert k == r, f"{name}: dim {d} is {k}, onnx says {r}"


def compare(model, view):
    ref = models.reference(model)
    for key in ("opset", "ir_version", "producer"):
        assert view[key] == ref[key]
    assert [(n, t) for n, t, _ in view["inputs"]] == [(n, t) for n, t, _ in ref["inputs"]]
    for (name, _, dims), (_, _, rdims) in zip(view["inputs"], ref["inputs"]):
        assert dims == rdims, name
    assert [(n, t) for n, t, _ in view["outputs"]] == [(n, t) for n, t, _ in ref["outputs"]]
    for (name, _, dims), (_, _, rdims) in zip(view["outputs"], ref["outputs"]):
        check_dims(name, dims, rdims)
    assert set(view["initializers"]) == set(ref["initializers"])
    for name, (t, dims, data) in ref["initializers"].items():
        kt, kdims, kdata, _ = view["initializers"][name]
        assert (kt, kdims) == (t, dims), name
        assert kdata == data, f"initializer {name}: bytes differ"
    assert [n[:4] for n in view["nodes"]] == [n[:4] for n in ref["nodes"]]
    for kn, rn in zip(view["nodes"], ref["nodes"]):
        assert kn[4] == rn[4], f"node {rn[0]} ({rn[1]}): attributes {kn[4]} vs {rn[4]}"
    for name, (t, dims) in ref["values"].items():
        kt, kdims = view["values"][name]
        assert kt == t, f"value {name}: type {kt} vs onnx {t}"
        check_dims(name, kdims, dims)
    return ref


@pytest.mark.parametrize("opset", range(13, 22))
def test_mlp_reads_as_onnx_reads_it(tmp_path, opset):
    m = models.mlp(opset)
    onnx.save(m, tmp_path / "mlp.onnx")
    view = kv.load(tmp_path / "mlp.onnx")
    compare(m, view)
    assert view["outputs"] == [("y", 1, ["batch", 8])]


@pytest.mark.parametrize("opset", range(17, 22))
def test_attention_block_shapes_match_onnx_shape_inference(tmp_path, opset):
    m = models.attention_block(opset)
    view = kv.load_bytes(m.SerializeToString())
    compare(m, view)
    # Kiln folds Shape of a known shape, so the dynamic reshape's result is fully known.
    assert view["values"]["o2"] == (1, [2, 5, 8])
    assert view["values"]["sp0"] == (1, [2, 5, 4])


@pytest.mark.parametrize("opset", [13, 17, 18, 21])
def test_elementwise_ops_keep_the_symbolic_batch(opset):
    m = models.elementwise(opset)
    view = kv.load_bytes(m.SerializeToString())
    compare(m, view)
    assert view["values"]["e"] == (1, ["batch", 4])
    assert view["values"]["rm"] == (1, ["batch", 1])
    assert view["values"]["rs"] == (1, ["batch"])
    assert view["values"]["sl"] == (1, ["batch", 2])
    assert view["values"]["ex"] == (1, [3, "batch", 4])
    assert view["values"]["rg"] == (7, [4])


def test_typed_fields_and_raw_data_decode_bit_exact():
    m = models.typed_initializers()
    view = kv.load_bytes(m.SerializeToString())
    compare(m, view)
    for name, (_, _, data, _) in view["initializers"].items():
        if name.endswith("_typed"):
            assert data == view["initializers"][name[:-6]][2] or name.startswith("boolean"), name


def test_external_data_is_read_from_the_models_folder(tmp_path):
    m = models.mlp(17)
    onnx.save_model(m, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    view = kv.load(tmp_path / "ext.onnx")
    compare(onnx.load(tmp_path / "ext.onnx"), view)
    # onnx moves the tensors held in raw_data out (w1 stays in its float_data field).
    stored = onnx.load(tmp_path / "ext.onnx", load_external_data=False)
    external = {t.name for t in stored.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    assert external == {"b1", "w2"}
    assert {name for name, (*_, ext) in view["initializers"].items() if ext} == external
    # From memory, the folder must be named.
    data = (tmp_path / "ext.onnx").read_bytes()
    assert kv.load_bytes(data, tmp_path)["initializers"] == view["initializers"]
    with pytest.raises(kv.KilnError, match="without a folder"):
        kv.load_bytes(data)


def test_inspect_prints_the_models_interface(tmp_path, kiln_cli):
    m = models.mlp(13)
    onnx.save(m, tmp_path / "mlp.onnx")
    out = subprocess.run([kiln_cli, "onnx", "inspect", "--json", str(tmp_path / "mlp.onnx")], check=True,
                         capture_output=True, text=True).stdout
    doc = json.loads(out)
    assert doc["opset"] == 13
    assert doc["inputs"] == [{"name": "x", "type": "float", "shape": ["batch", 8]}]
    assert doc["outputs"] == [{"name": "y", "type": "float", "shape": ["batch", 8]}]
    assert doc["ops"] == {"Gemm": 1, "Relu": 1, "Transpose": 1, "MatMul": 1}
    size = sum(onnx.numpy_helper.to_array(t).nbytes for t in m.graph.initializer)
    assert doc["initializers"] == {"count": 3, "bytes": size, "external_count": 0, "external_bytes": 0}
    text = subprocess.run([kiln_cli, "onnx", "inspect", str(tmp_path / "mlp.onnx")], check=True,
                          capture_output=True, text=True).stdout
    assert "opset 13" in text and "[batch, 8]" in text and "Gemm" in text


@pytest.mark.parametrize("starts,ends,steps", [([1], [-1], [1]), ([-100], [100], [1]), ([4], [-100], [-1]),
                                               ([100], [0], [-2]), ([-1], [-6], [-1]), ([0], [5], [3]),
                                               ([2], [2], [1]), ([3], [1], [1]), ([-100], [-200], [-1])])
def test_slice_clamps_as_the_specification_says(starts, ends, steps):
    n = onnx.helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="slice")
    inits = [models.i64("s", starts), models.i64("e", ends), models.i64("a", [1]), models.i64("st", steps)]
    m = models.make([n], [models.vi("x", 1, [2, 5])], [models.vi("y", 1, [2, None])], inits)
    compare(m, kv.load_bytes(m.SerializeToString()))
