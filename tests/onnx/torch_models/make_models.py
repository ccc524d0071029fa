"""make_models.py - the PyTorch-exported ONNX models that tests/onnx/test_onnx_torch_models.py runs, made ONCE BY
HAND and committed with onnxruntime's outputs beside them. torch is never installed in the test venv and this
script never runs in CI; run it again only to change the models (and then update the test's tables and
docs/onnx.md "Models exported from PyTorch"). It was run with (versions in models.json, "made_with"):

    python3 -m venv /work/torchvenv        # any folder outside the repository
    /work/torchvenv/bin/pip install torch==2.15.0 transformers==5.24.0 onnxscript==0.7.2 onnx==1.23.2 \
        onnxruntime==1.31.1 numpy==2.4.6
    /work/torchvenv/bin/python tests/onnx/torch_models/make_models.py [MODEL...]   # ~2 minutes on 2 cores

(PyPI's torch, a CUDA build run on the CPU; PyTorch's CPU-only wheel index serves the same operators. Given
MODEL names, only those are made again and the other entries of models.json are kept.)

Five models with small random weights (torch.manual_seed(0) before each; hidden 32, 4 heads, 2 layers, a
vocabulary of 96) so that every file stays well under 200 KB:

    mlp      nn.Sequential(Linear(32, 64), GELU(), Linear(64, 16))      x [batch, seq, 32] float
    encoder  nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)    src [batch, seq, 32] float
    gpt2     transformers GPT2LMHeadModel, 2 layers (logits)            input_ids, attention_mask [batch, seq] int64
    bert     transformers BertModel, 2 layers (last_hidden_state)       input_ids, attention_mask
    llama    transformers LlamaModel, 2 layers, 4 heads over 2 KV heads (GQA), RMSNorm, rotary, SwiGLU
             (last_hidden_state)                                        input_ids, attention_mask

each exported by both exporters with a dynamic batch and sequence: `torchscript` (torch.onnx.export(...,
dynamo=False), opset 17, dynamic_axes) and `dynamo` (dynamo=True, opset 18, dynamic_shapes). For each file
NAME-EXPORTER.onnx it writes NAME-EXPORTER.npz with the inputs and onnxruntime's outputs (CPU provider, all
graph optimizations) at two shapes, (batch, seq) = (1, 5) and (3, 8): keys `in{i}.{input name}` and
`out{i}.{output name}` for shape i. An exporter that fails on a model is recorded in models.json with its
error instead of a file. The HF models use eager attention (attn_implementation="eager"), no KV cache outputs,
and initializer_range 0.2 (not 0.02) so that attention is not uniform on random weights. The dynamo exporter's
per-node metadata_props (Python stack traces, two thirds of each file) are dropped; nothing else is changed.
"""
import inspect
import json
import pathlib
import sys
import traceback

import numpy as np
import onnx
import onnxruntime as ort
import torch
import transformers
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent
SHAPES = [(1, 5), (3, 8)]  # the (batch, seq) of the stored runs; export traces at (2, 7)
EXPORT_SHAPE = (2, 7)
HIDDEN, HEADS, FFN, VOCAB, LAYERS = 32, 4, 64, 96, 2


class Only(nn.Module):
    """A transformers model fed input_ids and attention_mask (as optimum exports them), with one tensor output
    and no KV cache. Without a mask, transformers 5 looks for packed sequences with torch.diff, which the
    TorchScript exporter cannot export."""

    def __init__(self, model, output):
        super().__init__()
        self.model, self.output = model, output

    def forward(self, input_ids, attention_mask):
        return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False), self.output)


HF_INPUTS = ["input_ids", "attention_mask"]


def mlp():
    return nn.Sequential(nn.Linear(HIDDEN, 2 * HIDDEN), nn.GELU(), nn.Linear(2 * HIDDEN, 16)), ["x"], ["y"]


class Encoder(nn.Module):
    """nn.TransformerEncoderLayer called with is_causal=False given: left to its default, torch 2.15's
    TorchScript exporter traces it as a tensor and fails ("argument 'is_causal' must be bool, not Tensor")."""

    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, FFN, dropout=0.0, batch_first=True)

    def forward(self, src):
        return self.layer(src, is_causal=False)


def encoder():
    return Encoder(), ["src"], ["y"]


def gpt2():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                                  n_inner=FFN, initializer_range=0.2, attn_implementation="eager")
    return Only(transformers.GPT2LMHeadModel(cfg), "logits"), HF_INPUTS, ["logits"]


def bert():
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                  num_attention_heads=HEADS, intermediate_size=FFN, max_position_embeddings=64,
                                  initializer_range=0.2, attn_implementation="eager")
    return Only(transformers.BertModel(cfg, add_pooling_layer=False), "last_hidden_state"), HF_INPUTS, \
        ["last_hidden_state"]


def llama():
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                                   num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=2,
                                   max_position_embeddings=64, initializer_range=0.2, attn_implementation="eager")
    return Only(transformers.LlamaModel(cfg), "last_hidden_state"), HF_INPUTS, ["last_hidden_state"]


MODELS = {"mlp": mlp, "encoder": encoder, "gpt2": gpt2, "bert": bert, "llama": llama}


def example(names, batch, seq, rng):
    """The inputs of one run: floats ~ N(0, 1), token ids in [0, VOCAB), and an attention mask whose last
    row pads its final three positions when there is more than one row."""
    out = []
    for n in names:
        if n == "input_ids":
            out.append(rng.integers(0, VOCAB, (batch, seq), dtype=np.int64))
        elif n == "attention_mask":
            mask = np.ones((batch, seq), np.int64)
            if batch > 1:
                mask[-1, -3:] = 0
            out.append(mask)
        else:
            out.append(rng.standard_normal((batch, seq, HIDDEN)).astype(np.float32))
    return out


def export(model, names, outputs, exporter, path):
    args = tuple(torch.from_numpy(a) for a in example(names, *EXPORT_SHAPE, np.random.default_rng(1)))
    if exporter == "torchscript":
        axes = {n: {0: "batch", 1: "seq"} for n in names + outputs}
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17, input_names=names,
                          output_names=outputs, dynamic_axes=axes)
    else:
        batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=1, max=64)
        params = list(inspect.signature(model.forward).parameters)  # the exported names are the caller's
        shapes = {p: {0: batch, 1: seq} for p in params[:len(names)]}
        prog = torch.onnx.export(model, args, dynamo=True, opset_version=18, input_names=names,
                                 output_names=outputs, dynamic_shapes=shapes)
        prog.save(str(path), external_data=False)
        m = onnx.load(str(path))
        for node in m.graph.node:  # the exporter's stack traces per node: two thirds of the file, no semantics
            del node.metadata_props[:]
        onnx.save(m, str(path))


def reference(path, names, rng):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    onames = [o.name for o in sess.get_outputs()]
    arrays = {}
    for i, (batch, seq) in enumerate(SHAPES):
        feeds = dict(zip(names, example(names, batch, seq, rng)))
        for n, a in feeds.items():
            arrays[f"in{i}.{n}"] = a
        for n, a in zip(onames, sess.run(None, feeds)):
            arrays[f"out{i}.{n}"] = a
    return arrays


def main():
    torch.backends.mha.set_fastpath_enabled(False)  # else TransformerEncoderLayer in eval exports as one fused aten op
    only = sys.argv[1:]
    manifest = {"made_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                              "onnx": onnx.__version__, "onnxruntime": ort.__version__,
                              "onnxscript": __import__("onnxscript").__version__, "numpy": np.__version__,
                              "python": sys.version.split()[0]},
                "shapes": SHAPES, "files": {}}
    old = HERE / "models.json"
    if only and old.exists():
        manifest["files"] = json.loads(old.read_text())["files"]
    for name, build in MODELS.items():
        if only and name not in only:
            continue
        for exporter in ("torchscript", "dynamo"):
            torch.manual_seed(0)
            model, names, outputs = build()
            model.eval()
            stem = f"{name}-{exporter}"
            path = HERE / f"{stem}.onnx"
            entry = {"model": name, "exporter": exporter, "inputs": names}
            try:
                with torch.no_grad():
                    export(model, names, outputs, exporter, path)
                m = onnx.load(str(path))
                entry["opset"] = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
                entry["ops"] = sorted({n.op_type for n in m.graph.node})
                np.savez(HERE / f"{stem}.npz", **reference(path, names, np.random.default_rng(22)))
                entry["bytes"] = path.stat().st_size + (HERE / f"{stem}.npz").stat().st_size
            except Exception as e:  # an exporter that cannot export this model: recorded, not fatal
                traceback.print_exc()
                entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                for suffix in (".onnx", ".npz", ".onnx.data"):
                    (HERE / f"{stem}{suffix}").unlink(missing_ok=True)
            manifest["files"][stem] = entry
            print(stem, entry.get("error") or f"{entry['bytes']} bytes, ops {' '.join(entry['ops'])}")
    old.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
