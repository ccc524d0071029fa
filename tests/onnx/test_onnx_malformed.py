"""A malformed or unsupported ONNX file is refused with a named error, never a crash: truncations at every
byte, bad varints, lengths past the end, wire types ONNX never uses, external data that leaves the model's
folder or its file, operators, domains, opsets, attributes and types Kiln does not claim, and graphs that are
not DAGs. Each case pins the status and the words of the message (the field, node, operator type, opset)."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import kiln_onnx_view as kv
import models


def refused(data, status, *words, folder=None):
    with pytest.raises(kv.KilnError) as e:
        kv.load_bytes(data, folder)
    assert e.value.status == status, e.value
    for w in words:
        assert w in e.value.message, f"{w!r} not in {e.value.message!r}"
    return e.value.message


def one_node(node, opset=17, inputs=None, outputs=None, inits=()):
    g = h.make_graph([node], "g", inputs or [models.vi("x", T.FLOAT, [2, 3])], outputs or [models.vi("y", T.FLOAT, None)],
                     list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def key(number, wire):
    return bytes([(number << 3) | wire]) if number < 16 else bytes([((number << 3) | wire) & 0x7f | 0x80, number >> 4])


def test_every_truncation_is_refused_with_a_message():
    data = models.mlp(13).SerializeToString()
    for n in range(len(data)):
        with pytest.raises(kv.KilnError) as e:
            kv.load_bytes(data[:n])
        assert e.value.status in ("KILN_E_FORMAT", "KILN_E_UNSUPPORTED"), (n, e.value)
        assert e.value.message


def test_bad_varints_and_lengths_name_the_offset():
    refused(b"\xff" * 11, "KILN_E_FORMAT", "bad varint", "byte offset 0")
    refused(b"\x08" + b"\xff" * 9 + b"\x02", "KILN_E_FORMAT", "bad varint")
    refused(b"\x08\xff", "KILN_E_FORMAT", "truncated varint")
    refused(key(7, 2) + b"\x80\x80\x80\x80\x80\x20", "KILN_E_FORMAT", "model", "has length", "over the")
    refused(b"\x0b", "KILN_E_FORMAT", "wire type 3")
    refused(b"\x00", "KILN_E_FORMAT", "field number 0")
    opset17 = key(8, 2) + b"\x02" + key(2, 0) + b"\x11"
    refused(opset17 + key(1, 2) + b"\x00", "KILN_E_FORMAT", "ir_version", "expected varint")


def test_a_model_without_an_ai_onnx_opset_or_graph_is_refused():
    refused(b"", "KILN_E_FORMAT", "no opset_import")
    m = models.mlp(13)
    m.ClearField("graph")
    refused(m.SerializeToString(), "KILN_E_FORMAT", "no graph")


@pytest.mark.parametrize("opset", [1, 12, 22, 23])
def test_opsets_outside_13_to_21_are_refused(opset):
    m = one_node(h.make_node("Relu", ["x"], ["y"]), opset=opset)
    refused(m.SerializeToString(), "KILN_E_UNSUPPORTED", f"opset {opset} is not supported", "13 to 21")


def test_unknown_operators_and_domains_name_node_op_and_opset():
    m = one_node(h.make_node("Conv", ["x", "x"], ["y"], name="conv1"))
    refused(m.SerializeToString(), "KILN_E_UNSUPPORTED", "'conv1'", "Conv", "opset 17", "not supported")
    m = one_node(h.make_node("FusedMatMul", ["x", "x"], ["y"], name="f", domain="com.microsoft"))
    refused(m.SerializeToString(), "KILN_E_UNSUPPORTED", "domain 'com.microsoft'")
    m = one_node(h.make_node("Gelu", ["x"], ["y"], name="g"), opset=19)
    refused(m.SerializeToString(), "KILN_E_FORMAT", "Gelu does not exist before opset 20")


def test_attributes_are_typed_as_the_specification_gives_them():
    m = one_node(h.make_node("Softmax", ["x"], ["y"], name="sm", axis=1.0))
    refused(m.SerializeToString(), "KILN_E_FORMAT", "'sm'", "attribute 'axis' has type FLOAT", "gives INT")
    m = one_node(h.make_node("Relu", ["x"], ["y"], name="r", alpha=0.1))
    refused(m.SerializeToString(), "KILN_E_UNSUPPORTED", "attribute 'alpha' is not supported")
    # ReduceMean's axes attribute went away in opset 18 (an input since).
    m = one_node(h.make_node("ReduceMean", ["x"], ["y"], name="rm", axes=[1]), opset=18)
    refused(m.SerializeToString(), "KILN_E_UNSUPPORTED", "attribute 'axes' is not supported", "opset 18")
    m = one_node(h.make_node("Cast", ["x"], ["y"], name="c"))
    refused(m.SerializeToString(), "KILN_E_FORMAT", "required attribute 'to'")


def test_types_kiln_does_not_compute_are_named():
    m = one_node(h.make_node("Add", ["x", "x"], ["y"], name="add"), inputs=[models.vi("x", T.DOUBLE, [2])],
                 outputs=[models.vi("y", T.DOUBLE, [2])])
    refused(m.SerializeToString(), "KILN_E_UNSUPPORTED", "'add'", "type double", "Add")
    s = h.make_tensor("s", T.STRING, [1], [b"a"])
    m = one_node(h.make_node("Relu", ["x"], ["y"]), inits=[s])
    refused(m.SerializeToString(), "KILN_E_UNSUPPORTED", "STRING tensors")


def test_graphs_must_be_dags_with_every_input_defined():
    n = h.make_node
    g = h.make_graph([n("Relu", ["b"], ["a"], name="first"), n("Relu", ["a"], ["b"], name="second")], "g",
                     [models.vi("x", T.FLOAT, [1])], [models.vi("a", T.FLOAT, [1])])
    refused(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString(), "KILN_E_FORMAT", "cycle")
    m = one_node(n("Add", ["x", "nowhere"], ["y"], name="add"))
    refused(m.SerializeToString(), "KILN_E_FORMAT", "'add'", "input 'nowhere' is not defined")
    g = h.make_graph([n("Relu", ["x"], ["y"], name="r1"), n("Relu", ["x"], ["y"], name="r2")], "g",
                     [models.vi("x", T.FLOAT, [1])], [models.vi("y", T.FLOAT, [1])])
    refused(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString(), "KILN_E_FORMAT",
            "'r2'", "output 'y' is already defined")
    m = one_node(n("Relu", ["x"], ["z"]))
    refused(m.SerializeToString(), "KILN_E_FORMAT", "graph output 'y' is not defined")


def test_inconsistent_shapes_are_refused():
    m = one_node(h.make_node("MatMul", ["x", "w"], ["y"], name="mm"), inits=[models.f32("w", np.zeros((4, 5)))])
    refused(m.SerializeToString(), "KILN_E_FORMAT", "'mm'", "inner dimensions 3 and 4 differ")
    m = one_node(h.make_node("Add", ["x", "w"], ["y"], name="add"), inits=[models.f32("w", np.zeros(4))])
    refused(m.SerializeToString(), "KILN_E_FORMAT", "dimensions 3 and 4 cannot broadcast")
    m = one_node(h.make_node("Reshape", ["x", "s"], ["y"], name="rs"), inits=[models.i64("s", [4, -1, -1])])
    refused(m.SerializeToString(), "KILN_E_FORMAT", "more than one -1")
    m = one_node(h.make_node("Relu", ["x"], ["y"]), outputs=[models.vi("y", T.FLOAT, [2, 4])])
    refused(m.SerializeToString(), "KILN_E_FORMAT", "dimension 1 is declared 4 but is 3")


def test_tensor_data_must_match_its_shape():
    t = models.f32("w", np.zeros(6))
    t.raw_data = t.raw_data[:-4]
    refused(one_node(h.make_node("Relu", ["x"], ["y"]), inits=[t]).SerializeToString(), "KILN_E_FORMAT",
            "'w'", "raw_data holds 20 bytes", "need 24")
    t = h.make_tensor("w", T.INT64, [3], [1, 2], raw=False) if False else models.i64("w", [1, 2, 3])
    t.ClearField("raw_data")
    t.int64_data.extend([1, 2])
    refused(one_node(h.make_node("Relu", ["x"], ["y"]), inits=[t]).SerializeToString(), "KILN_E_FORMAT",
            "2 values present", "needs 3")
    t = models.f32("w", np.zeros(1))
    t.ClearField("dims")
    t.dims.extend([1 << 40, 1 << 40])
    refused(one_node(h.make_node("Relu", ["x"], ["y"]), inits=[t]).SerializeToString(), "KILN_E_FORMAT", "overflow")


def external_model(location, offset=0, length=None):
    w = T()
    w.name, w.data_type = "w", T.FLOAT
    w.dims.extend([2])
    w.data_location = T.EXTERNAL
    entries = [("location", location), ("offset", str(offset))] + ([("length", str(length))] if length is not None else [])
    for k, v in entries:
        e = w.external_data.add()
        e.key, e.value = k, v
    return one_node(h.make_node("Add", ["x", "w"], ["y"]), inputs=[models.vi("x", T.FLOAT, [2])], inits=[w])


def test_external_data_stays_inside_the_models_folder_and_file(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (tmp_path / "secret.bin").write_bytes(b"\0" * 8)
    os.symlink(tmp_path / "secret.bin", tmp_path / "model" / "link.bin")
    folder = tmp_path / "model"
    view = kv.load_bytes(external_model("w.bin", 8, 8).SerializeToString(), folder)
    assert view["initializers"]["w"][2] == np.array([2, 3], dtype=np.float32).tobytes()
    refused(external_model("../secret.bin").SerializeToString(), "KILN_E_FORMAT", "leaves the model's folder",
            folder=folder)
    refused(external_model("sub/../../secret.bin").SerializeToString(), "KILN_E_FORMAT", "leaves", folder=folder)
    refused(external_model(str(tmp_path / "secret.bin")).SerializeToString(), "KILN_E_FORMAT", "relative path",
            folder=folder)
    refused(external_model("link.bin").SerializeToString(), "KILN_E_FORMAT", "resolves outside", folder=folder)
    refused(external_model("w.bin", 12, 8).SerializeToString(), "KILN_E_FORMAT", "exceeds the size", folder=folder)
    refused(external_model("w.bin", 100).SerializeToString(), "KILN_E_FORMAT", "past the end", folder=folder)
    refused(external_model("w.bin", 0).SerializeToString(), "KILN_E_FORMAT", "holds 16 bytes", folder=folder)
    refused(external_model("w.bin", "-1").SerializeToString(), "KILN_E_FORMAT", "not a decimal", folder=folder)
    refused(external_model("missing.bin").SerializeToString(), "KILN_E_IO", "missing.bin", folder=folder)


def test_limits_are_named():
    m = one_node(h.make_node("Relu", ["x"], ["y"]), outputs=[models.vi("y", T.FLOAT, [1] * 17)])
    refused(m.SerializeToString(), "KILN_E_FORMAT", "KILN_MAX_ONNX_RANK")
    m = one_node(h.make_node("Concat", ["x"] * 4097, ["y"], axis=0))
    refused(m.SerializeToString(), "KILN_E_FORMAT", "KILN_MAX_ONNX_NODE_IO")
    m = one_node(h.make_node("Relu", ["x"], ["y"], **{f"a{i}": i for i in range(1025)}))
    refused(m.SerializeToString(), "KILN_E_FORMAT", "KILN_MAX_ONNX_ATTRS")


def test_element_types_outside_the_list_are_named():
    m = one_node(h.make_node("Relu", ["x"], ["y"], name="r"), inputs=[models.vi("x", T.FLOAT, [2])])
    m.graph.input[0].type.tensor_type.elem_type = -5
    refused(m.SerializeToString(), "KILN_E_UNSUPPORTED", "'r'", "type undefined")
    m.graph.input[0].type.tensor_type.elem_type = 1000
    refused(m.SerializeToString(), "KILN_E_UNSUPPORTED", "type undefined")
