#!/usr/bin/env python3
"""
make_hf_onnx.py - the full-size exported models of bench/onnx_compare.py --file (issue 22, part 6), made by hand
with torch (never in CI; torch is not a test dependency):

    /work/torchvenv/bin/python bench/make_hf_onnx.py OUT_DIR      # gpt2-small.onnx, bert-base.onnx (~0.5 GB each)

GPT-2 small (GPT2Model: 12 layers, 768 wide, 12 heads, vocabulary 50257, 1024 positions; 124M parameters,
last_hidden_state: the LM head, one more 768 x 50257 MatMul, is left out so that the comparison is of the
transformer) and BERT-base (BertModel without the pooler: 12 layers, 768 wide, 12 heads, FFN 3072, vocabulary
30522), random weights from a fixed seed at transformers' default initializer range, eager attention, exported by
torch.onnx's TorchScript exporter at opset 17 with batch and sequence dynamic and int64 input_ids and
attention_mask inputs, as tests/onnx/torch_models/make_models.py does for its small models (whose Only wrapper
and export function this reuses).
"""
import pathlib
import sys

import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "onnx" / "torch_models"))
import make_models as mm  # noqa: E402


def main():
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(attn_implementation="eager"))
    bert = transformers.BertModel(transformers.BertConfig(attn_implementation="eager"), add_pooling_layer=False)
    for name, model in (("gpt2-small", gpt2), ("bert-base", bert)):
        model.eval()
        mm.export(mm.Only(model, "last_hidden_state"), mm.HF_INPUTS, ["last_hidden_state"], "torchscript",
                  out / f"{name}.onnx")
        print(f"{out / name}.onnx: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
