#!/usr/bin/env python3
"""convert_bert.py - a Hugging Face BertModel (a sentence-transformers folder such as all-MiniLM-L6-v2)
to GGUF, as llama.cpp's convert_hf_to_gguf.py writes BERT (its conversion/bert.py), with the `gguf`
package alone: no torch, no transformers.

Reads config.json, model.safetensors, vocab.txt, tokenizer_config.json and, when present,
1_Pooling/config.json (sentence-transformers' pooling: bert.pooling_type 1 mean, 2 cls, 3 last).

Writes:
  general.architecture = "bert"; bert.context_length, embedding_length, block_count,
  feed_forward_length, attention.head_count, attention.layer_norm_epsilon, attention.causal = false,
  pooling_type; tokenizer.ggml.model = "bert", tokens in llama.cpp's "phantom space" spelling (a
  word-initial piece "word" as "\u2581word", a continuation "##ing" as "ing", special tokens as they are),
  token_type (CONTROL for the special tokens, NORMAL otherwise), token_type_count, and the ids of
  [UNK], [CLS] (cls_token_id), [SEP] (seperator_token_id), [PAD] and [MASK], with add_bos_token and
  add_sep_token true: a sequence is [CLS] ... [SEP].
  Tensors: token_embd, position_embd, token_types, token_embd_norm, and per block attn_q/k/v,
  attn_output, attn_output_norm, ffn_up, ffn_down, layer_output_norm (weights and biases); the pooler
  is dropped. --type f16 stores the 2-D weights as F16, except position_embd and token_types, which
  llama.cpp keeps F32 as it keeps every 1-D tensor and norm. For Q8_0 and the other mixes, convert to F16
  (or F32) and run `kiln quantize`.

usage: convert_bert.py MODEL_DIR OUT.gguf [--type f32|f16] [--name NAME]
"""
import argparse
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file

import gguf

POOLING = {"pooling_mode_mean_tokens": 1, "pooling_mode_cls_token": 2, "pooling_mode_lasttoken": 3}
SPECIALS = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def tensor_names(n_layer):
    """HF name -> GGUF name (the names of gguf-py's MODEL_TENSORS[MODEL_ARCH.BERT])."""
    names = {
        "embeddings.word_embeddings.weight": "token_embd.weight",
        "embeddings.position_embeddings.weight": "position_embd.weight",
        "embeddings.token_type_embeddings.weight": "token_types.weight",
        "embeddings.LayerNorm.weight": "token_embd_norm.weight",
        "embeddings.LayerNorm.bias": "token_embd_norm.bias",
    }
    parts = {
        "attention.self.query": "attn_q",
        "attention.self.key": "attn_k",
        "attention.self.value": "attn_v",
        "attention.output.dense": "attn_output",
        "attention.output.LayerNorm": "attn_output_norm",
        "intermediate.dense": "ffn_up",
        "output.dense": "ffn_down",
        "output.LayerNorm": "layer_output_norm",
    }
    for il in range(n_layer):
        for hf, gg in parts.items():
            for kind in ("weight", "bias"):
                names[f"encoder.layer.{il}.{hf}.{kind}"] = f"blk.{il}.{gg}.{kind}"
    return names


def read_json(path, default=None):
    if not os.path.exists(path):
        if default is None:
            sys.exit(f"convert_bert.py: {path} is missing")
        return default
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def pooling_type(model_dir):
    cfg = read_json(os.path.join(model_dir, "1_Pooling", "config.json"), {})
    chosen = [POOLING[k] for k, v in cfg.items() if v and k in POOLING]
    if any(v for k, v in cfg.items() if k.startswith("pooling_mode") and k not in POOLING and v):
        sys.exit("convert_bert.py: 1_Pooling/config.json asks for a pooling Kiln does not know (max, sqrt-len)")
    return chosen[0] if len(chosen) == 1 else 0


def vocab(model_dir):
    with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    tok_cfg = read_json(os.path.join(model_dir, "tokenizer_config.json"), {})
    special = {k: tok_cfg.get(k, "[" + k.split("_")[0].upper() + "]") for k in SPECIALS}
    special_ids = {k: tokens.index(v) for k, v in special.items() if v in tokens}
    control = set(special_ids.values())
    types, texts = [], []
    for i, t in enumerate(tokens):
        if i in control:
            texts.append(t)
            types.append(gguf.TokenType.CONTROL)
        else:
            texts.append(t[2:] if t.startswith("##") else "\u2581" + t)
            types.append(gguf.TokenType.NORMAL)
    return texts, types, special_ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--type", choices=("f32", "f16"), default="f16")
    ap.add_argument("--name", default=None)
    a = ap.parse_args()

    cfg = read_json(os.path.join(a.model_dir, "config.json"))
    if cfg.get("model_type") != "bert" or cfg.get("position_embedding_type", "absolute") != "absolute":
        sys.exit("convert_bert.py: config.json is not a BERT model with absolute positions")
    if cfg.get("hidden_act") not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
        sys.exit(f"convert_bert.py: hidden_act {cfg.get('hidden_act')!r} is not a GELU")
    n_layer = cfg["num_hidden_layers"]
    weights = load_file(os.path.join(a.model_dir, "model.safetensors"))
    weights = {k[5:] if k.startswith("bert.") else k: v for k, v in weights.items()}
    names = tensor_names(n_layer)
    texts, types, special_ids = vocab(a.model_dir)
    if len(texts) != cfg["vocab_size"]:
        sys.exit(f"convert_bert.py: vocab.txt has {len(texts)} tokens, config.json says {cfg['vocab_size']}")

    w = gguf.GGUFWriter(a.out, "bert")
    w.add_name(a.name or os.path.basename(os.path.normpath(a.model_dir)))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if a.type == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(n_layer)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg["layer_norm_eps"])
    w.add_bool("bert.attention.causal", False)
    w.add_uint32("bert.pooling_type", pooling_type(a.model_dir))
    w.add_uint32("tokenizer.ggml.token_type_count", cfg.get("type_vocab_size", 2))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(texts)
    w.add_token_types(types)
    # The key names of llama.cpp's gguf-py (Keys.Tokenizer), written as plain integers so that the
    # PyPI release of `gguf`, which lacks some of the helpers, writes them too.
    for key, gguf_key in (("unk_token", "unknown_token_id"), ("sep_token", "seperator_token_id"),
                          ("pad_token", "padding_token_id"), ("cls_token", "cls_token_id"),
                          ("mask_token", "mask_token_id")):
        if key in special_ids:
            w.add_uint32("tokenizer.ggml." + gguf_key, special_ids[key])
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_sep_token", True)

    used = set()
    for hf, name in names.items():
        if hf not in weights:
            sys.exit(f"convert_bert.py: tensor {hf} is missing from model.safetensors")
        data = weights[hf].astype(np.float32)
        keep_f32 = data.ndim == 1 or name.endswith("_norm.weight") or name in ("position_embd.weight",
                                                                                "token_types.weight")
        if a.type == "f16" and not keep_f32:
            data = data.astype(np.float16)
        w.add_tensor(name, data)
        used.add(hf)
    dropped = sorted(set(weights) - used)
    unknown = [k for k in dropped if not k.startswith("pooler.") and k != "embeddings.position_ids"]
    if unknown:
        sys.exit(f"convert_bert.py: tensors this converter does not know: {', '.join(unknown[:5])}")

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"convert_bert.py: wrote {a.out} ({a.type}, {len(used)} tensors, {len(texts)} tokens)")


if __name__ == "__main__":
    main()
