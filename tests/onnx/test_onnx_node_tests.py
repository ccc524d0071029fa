"""The ONNX backend node test cases that ship inside the onnx package (onnx.backend.test.case.node: the
models of onnx/backend/test/data/node, made from their generators, since the wheel carries the generators
rather than the files): every model loads or is refused with a named error, never a crash. The test prints
how many load, why the rest are refused, and for each operator Kiln claims how many of its cases load. Each
model that loads reads as the onnx package reads it (tests/onnx/test_onnx_read.py's comparison), and a model
made only of claimed operators at opsets 13 to 21 is refused only for an element type Kiln does not compute
(int8, uint8, int16, uint16, uint32, uint64, float16, string; bool for ReduceMax) or a non-tensor input."""
import collections
import re

import onnx
import pytest

import kiln_onnx_view as kv
from test_onnx_read import compare

# The operators issue 22 claims (src/import/onnx/onnx_ops.c, docs/onnx.md).
CLAIMED = set("""MatMul Gemm Add Sub Mul Div Pow Sqrt Reciprocal Neg Exp Log Tanh Erf Relu Gelu Sigmoid Softmax
LayerNormalization ReduceMean ReduceSum ReduceMax Transpose Reshape Flatten Squeeze Unsqueeze Concat Split Slice
Gather GatherElements Expand Where Equal Greater GreaterOrEqual Less And Not IsNaN Cast Shape ConstantOfShape Range
Constant Identity Trilu Mod""".split())


def node_models(cache):
    """The node test models, written once per onnx version into the cache folder."""
    folder = cache / "node"
    stamp = folder / ".onnx-version"
    if not stamp.exists() or stamp.read_text() != onnx.__version__:
        import onnx.backend.test.case.node as node

        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.onnx"):
            old.unlink()
        for case in node.collect_testcases():
            (folder / f"{case.name}.onnx").write_bytes(case.model.SerializeToString())
        stamp.write_text(onnx.__version__)
    return sorted(folder.glob("*.onnx"))


def reason(message):
    """A refusal's kind: the words that stay when names and numbers are taken out."""
    if "opset" in message and "is not supported" in message:
        return "opset outside 13..21"
    m = re.search(r"operator (\S+) is not supported", message)
    if m:
        return "unsupported operator"
    m = re.search(r"has type (\S+), which Kiln does not support", message)
    if m:
        return f"unsupported type {m.group(1)}"
    return re.sub(r"'[^']*'|\d+", "_", message.split(": ", 1)[-1])[:80]


def test_every_node_test_model_loads_or_is_refused_by_name(onnx_cache, capsys):
    paths = node_models(onnx_cache)
    assert len(paths) > 1000
    loaded, reasons = [], collections.Counter()
    per_op = collections.defaultdict(lambda: [0, 0])  # claimed op -> [cases, loaded]
    mismatches, claimed_refused = [], []
    for path in paths:
        model = onnx.load(path)
        ops = {n.op_type for n in model.graph.node}
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        try:
            view = kv.load(path)
        except kv.KilnError as e:
            assert e.status in ("KILN_E_FORMAT", "KILN_E_UNSUPPORTED"), (path.name, e)
            assert e.message, path.name
            reasons[reason(e.message)] += 1
            ok = False
            # A model of claimed operators at a claimed opset is refused only for a type Kiln does not compute.
            if ops <= CLAIMED and 13 <= opset <= 21 and not re.search(r"which Kiln does not support|not a tensor",
                                                                       e.message):
                claimed_refused.append(f"{path.stem}: {e.message}")
        else:
            loaded.append(path.name)
            ok = True
            try:
                compare(model, view)
            except AssertionError as e:
                mismatches.append(f"{path.stem}: {e}")
        if len(ops) == 1 and ops <= CLAIMED:
            per_op[ops.pop()][0] += 1
            per_op[next(iter({n.op_type for n in model.graph.node}))][1] += ok
    with capsys.disabled():
        print(f"\nONNX backend node tests (onnx {onnx.__version__}): {len(loaded)} of {len(paths)} load")
        for why, n in reasons.most_common(12):
            print(f"  refused {n:5d}: {why}")
        print("  claimed operators (single-operator cases loaded / cases):")
        print("   " + ", ".join(f"{op} {l}/{c}" for op, (c, l) in sorted(per_op.items())))
    assert not mismatches, "\n".join(mismatches[:20])
    assert not claimed_refused, "\n".join(claimed_refused[:20])
    assert len(loaded) > 0
