"""gen_onnx_corpus.py - writes the seed corpus of fuzz_onnx (fuzz/corpus/onnx/): the test models of
tests/onnx/models.py at two opsets, one with its weights in fuzz/onnx_ext/weights.bin (external data), and
a few one-node models. Run by hand in the ONNX tests' venv (scripts/test-onnx.sh makes it):
    BUILD/venv-onnx/bin/python fuzz/gen_onnx_corpus.py
"""
import os
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

root = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(root.parent / "tests" / "onnx"))
import models  # noqa: E402

out = root / "corpus" / "onnx"
out.mkdir(parents=True, exist_ok=True)
seeds = {
    "mlp13": models.mlp(13), "mlp21": models.mlp(21), "attention17": models.attention_block(17),
    "attention18": models.attention_block(18), "elementwise13": models.elementwise(13),
    "elementwise18": models.elementwise(18), "typed": models.typed_initializers(),
}
for name, m in seeds.items():
    (out / f"{name}.onnx").write_bytes(m.SerializeToString())

# External data: a 4x8 float weight (128 bytes) at offset 64 of the 256-byte weights.bin beside the target.
w = T()
w.name, w.data_type = "w", T.FLOAT
w.dims.extend([4, 8])
w.data_location = T.EXTERNAL
for k, v in (("location", "weights.bin"), ("offset", "64"), ("length", "128")):
    e = w.external_data.add()
    e.key, e.value = k, v
g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "ext",
                 [h.make_tensor_value_info("x", T.FLOAT, ["n", 4])], [h.make_tensor_value_info("y", T.FLOAT, ["n", 8])],
                 [w])
(out / "external.onnx").write_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString())

# One node each, for the operators the bigger seeds leave out.
one = [("gather", h.make_node("Gather", ["x", "i"], ["y"], axis=1), [models.i64("i", [[0, 1]])]),
       ("expand", h.make_node("Expand", ["x", "s"], ["y"]), [models.i64("s", [2, 1, 4])]),
       ("flatten", h.make_node("Flatten", ["x"], ["y"], axis=0), []),
       ("gelu", h.make_node("Gelu", ["x"], ["y"], approximate="none"), [])]
for name, node, inits in one:
    g = h.make_graph([node], name, [h.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    (out / f"{name}.onnx").write_bytes(m.SerializeToString())
print(f"wrote {len(os.listdir(out))} seeds to {out}")
