#!/usr/bin/env python3
"""gen_arch_refs.py - tiny random-weight models of every supported architecture, written as GGUF the way
llama.cpp's convert_hf_to_gguf.py writes them, with reference logits from HF transformers.

For each architecture this builds a 2-layer model from a transformers config with every structural feature
present (grouped-query attention with Hq != Hkv, biases, QK-norm, partial rotary, tied and untied output,
Llama 3 rope scaling with a small original context so its factors matter, a sliding window shorter than
the test sequence), runs it in float32 on a fixed prompt (prefill) and for 8 greedy decode steps with the
KV cache, and writes:

  tests/data/arch/<name>.gguf       the model, F32 weights, llama.cpp tensor names and metadata
  tests/data/arch/<name>.ref        the reference (little-endian): "KLNREF01", u32 n_prompt, u32 n_steps,
                                    u32 n_vocab, i32 prompt[n_prompt], i32 greedy[n_steps + 1],
                                    f32 logits[n_steps + 1][n_vocab]; logits[0] is the last prompt
                                    position's, logits[s] the s-th decode step's (its input is greedy[s-1])
  tests/data/arch/<name>.json       provenance: config, seed, versions, and the margins checked below

Run by hand (torch is several GB; CI uses the committed files):
  pip install torch transformers gguf numpy
  python3 tools/gen_arch_refs.py [--out tests/data/arch]

Random weights are drawn with a scale that spreads the logits, and a seed is kept only when every greedy
choice wins by a clear margin (so greedy continuations are well defined under float32 rounding) and the
feature under test changes the logits (the window, the Llama 3 factors, partial rotary).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import transformers
import gguf
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers

N_LAYER = 2
E = 48          # embedding width
HQ, HKV = 4, 2  # query and key/value heads (GQA ratio 2)
FF = 96
N_PROMPT = 6
N_STEPS = 8
MIN_MARGIN = 2e-3  # top-1 minus top-2 logit, relative to max |logit|, at every greedy step

CORPUS = """Once upon a time there was a little girl named Lily. She liked to play in the garden with her
dog. One day the sun was hot and the sky was blue. Lily saw a big red ball under the tree and she ran to
get it. The dog ran after her and they played all day. When the stars came out, Lily went home to sleep.
Kiln is an inference engine for transformer language models, written in C11. It loads GGUF model files,
expresses every forward pass as a graph, and runs it on a CPU backend with a persistent thread pool.
The quick brown fox jumps over the lazy dog 0123456789 times; what a day it was!
"""


def train_bpe(vocab_size):
    """A byte-level BPE vocabulary (GPT-2 byte-to-unicode alphabet) trained on CORPUS."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CORPUS] * 4, trainer)
    data = json.loads(tok.to_str())
    vocab = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, merges


BYTE_DECODER = None


def byte_decoder():
    global BYTE_DECODER
    if BYTE_DECODER is None:
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
            list(range(ord("\xae"), ord("\xff") + 1))
        cs = bs[:]
        n = 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        BYTE_DECODER = {chr(c): b for b, c in zip(bs, cs)}
    return BYTE_DECODER


def spm_vocab(bpe_tokens):
    """A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then the BPE pieces that
    are valid UTF-8 (spaces as U+2581), scored by rank."""
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append("<0x%02X>" % b)
        scores.append(0.0)
        types.append(6)
    seen = set(tokens)
    dec = byte_decoder()
    for i, t in enumerate(bpe_tokens):
        if t.startswith("<|"):
            continue
        try:
            piece = bytes(dec[c] for c in t).decode("utf-8").replace(" ", "\u2581")
        except (UnicodeDecodeError, KeyError):
            continue
        if piece in seen or len(piece) < 2:
            continue
        seen.add(piece)
        tokens.append(piece)
        scores.append(-float(i))
        types.append(1)
    return tokens, scores, types


def init_weights(model, seed):
    """Weights with spread: matrices N(0, 1/fan_in), embeddings N(0, 1), norm weights 1 + N(0, 0.1),
    biases N(0, 0.1); the output projection N(0, 0.25) so that logits differ clearly."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                base = 1.0 if ("norm" in name or ".ln_" in name or "ln_f" in name) and "bias" not in name else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed" in name or ".wte" in name or ".wpe" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "lm_head" in name:
                p.copy_(0.25 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[0] if "transformer.h." in name else p.shape[1]  # GPT-2 Conv1D is [in, out]
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))


def run_reference(model, prompt):
    """Last-position logits of the prefill, then of N_STEPS greedy decode steps through the KV cache."""
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        logits = [out.logits[0, -1].float().numpy().copy()]
        greedy = [int(np.argmax(logits[-1]))]
        past = out.past_key_values
        for _ in range(N_STEPS):
            out = model(torch.tensor([[greedy[-1]]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits.append(out.logits[0, -1].float().numpy().copy())
            greedy.append(int(np.argmax(logits[-1])))
    return np.stack(logits), greedy


def min_margin(logits):
    m = 1.0
    for row in logits:
        top = np.sort(row)[-2:]
        m = min(m, float((top[1] - top[0]) / np.max(np.abs(row))))
    return m


def permute_llama(w, n_head):
    """llama.cpp's LlamaModel.permute: HF's rotate_half row order -> adjacent rope pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class Writer:
    def __init__(self, path, arch):
        self.w = gguf.GGUFWriter(path, arch)
        self.arch = arch

    def tensor(self, name, t):
        self.w.add_tensor(name, np.ascontiguousarray(t.detach().float().numpy(), dtype=np.float32))

    def finish(self):
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()


def add_vocab(w, vocab, pre):
    if vocab["model"] == "gpt2":
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(vocab["tokens"])
        w.add_token_types(vocab["types"])
        w.add_token_merges(vocab["merges"])
        w.add_bos_token_id(vocab["eos"])
        w.add_eos_token_id(vocab["eos"])
    else:
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(vocab["tokens"])
        w.add_token_scores(vocab["scores"])
        w.add_token_types(vocab["types"])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)


def common_kv(w, cfg, n_ctx, head_dim, n_rot):
    w.add_name("kiln-test-" + w.arch)
    w.add_context_length(n_ctx)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(n_rot)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)


def write_llama_like(path, arch, model, cfg, vocab, pre, head_dim, permute, extra=None):
    """llama, qwen2, qwen3, (mistral as llama): separate projections, SwiGLU, RMSNorm."""
    w = Writer(path, arch)
    n_rot = int(head_dim * cfg.rope_parameters.get("partial_rotary_factor", 1.0))
    common_kv(w.w, cfg, cfg.max_position_embeddings, head_dim, n_rot)
    if arch == "qwen3":
        w.w.add_key_length(head_dim)
        w.w.add_value_length(head_dim)
    if extra:
        extra(w.w)
    add_vocab(w.w, vocab, pre)
    sd = model.state_dict()
    w.tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % i
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if permute:
            q, k = permute_llama(q, cfg.num_attention_heads), permute_llama(k, cfg.num_key_value_heads)
        w.tensor("blk.%d.attn_norm.weight" % i, sd[p + "input_layernorm.weight"])
        w.tensor("blk.%d.attn_q.weight" % i, q)
        w.tensor("blk.%d.attn_k.weight" % i, k)
        w.tensor("blk.%d.attn_v.weight" % i, sd[p + "self_attn.v_proj.weight"])
        for b in ("q", "k", "v"):
            if p + "self_attn.%s_proj.bias" % b in sd:
                w.tensor("blk.%d.attn_%s.bias" % (i, b), sd[p + "self_attn.%s_proj.bias" % b])
        if p + "self_attn.q_norm.weight" in sd:
            w.tensor("blk.%d.attn_q_norm.weight" % i, sd[p + "self_attn.q_norm.weight"])
            w.tensor("blk.%d.attn_k_norm.weight" % i, sd[p + "self_attn.k_norm.weight"])
        w.tensor("blk.%d.attn_output.weight" % i, sd[p + "self_attn.o_proj.weight"])
        w.tensor("blk.%d.ffn_norm.weight" % i, sd[p + "post_attention_layernorm.weight"])
        w.tensor("blk.%d.ffn_gate.weight" % i, sd[p + "mlp.gate_proj.weight"])
        w.tensor("blk.%d.ffn_up.weight" % i, sd[p + "mlp.up_proj.weight"])
        w.tensor("blk.%d.ffn_down.weight" % i, sd[p + "mlp.down_proj.weight"])
    w.tensor("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        w.tensor("output.weight", sd["lm_head.weight"])
    return w


def write_phi3(path, model, cfg, vocab):
    w = Writer(path, "phi3")
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    n_rot = int(head_dim * cfg.rope_parameters["partial_rotary_factor"])
    common_kv(w.w, cfg, cfg.max_position_embeddings, head_dim, n_rot)
    add_vocab(w.w, vocab, None)
    sd = model.state_dict()
    w.tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        p = "model.layers.%d." % i
        w.tensor("blk.%d.attn_norm.weight" % i, sd[p + "input_layernorm.weight"])
        w.tensor("blk.%d.attn_qkv.weight" % i, sd[p + "self_attn.qkv_proj.weight"])
        w.tensor("blk.%d.attn_output.weight" % i, sd[p + "self_attn.o_proj.weight"])
        w.tensor("blk.%d.ffn_norm.weight" % i, sd[p + "post_attention_layernorm.weight"])
        w.tensor("blk.%d.ffn_up.weight" % i, sd[p + "mlp.gate_up_proj.weight"])
        w.tensor("blk.%d.ffn_down.weight" % i, sd[p + "mlp.down_proj.weight"])
    w.tensor("output_norm.weight", sd["model.norm.weight"])
    w.tensor("output.weight", sd["lm_head.weight"])
    return w


def write_gpt2(path, model, cfg, vocab):
    w = Writer(path, "gpt2")
    w.w.add_name("kiln-test-gpt2")
    w.w.add_context_length(cfg.n_positions)
    w.w.add_embedding_length(cfg.n_embd)
    w.w.add_feed_forward_length(4 * cfg.n_embd)
    w.w.add_block_count(cfg.n_layer)
    w.w.add_head_count(cfg.n_head)
    w.w.add_layer_norm_eps(cfg.layer_norm_epsilon)
    w.w.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_vocab(w.w, vocab, "gpt-2")
    sd = model.state_dict()
    w.tensor("token_embd.weight", sd["transformer.wte.weight"])
    w.tensor("position_embd.weight", sd["transformer.wpe.weight"])
    names = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
             "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    for i in range(cfg.n_layer):
        for hf, ll in names.items():
            wt = sd["transformer.h.%d.%s.weight" % (i, hf)]
            if hf not in ("ln_1", "ln_2"):
                wt = wt.transpose(0, 1)  # Conv1D stores [in, out]; the converter transposes
            w.tensor("blk.%d.%s.weight" % (i, ll), wt)
            w.tensor("blk.%d.%s.bias" % (i, ll), sd["transformer.h.%d.%s.bias" % (i, hf)])
    w.tensor("output_norm.weight", sd["transformer.ln_f.weight"])
    w.tensor("output_norm.bias", sd["transformer.ln_f.bias"])
    return w  # tied: no output.weight (Kiln falls back to the token embedding)


def llama3_factors(cfg, head_dim):
    """convert_hf_to_gguf.py's rope_freqs.weight for rope_type llama3."""
    rp = cfg.rope_parameters
    base, factor = rp["rope_theta"], rp["factor"]
    low, high, old = rp["low_freq_factor"], rp["high_freq_factor"], rp["original_max_position_embeddings"]
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(1)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32)


def configs(bpe_v, spm_v, big_v, eos):
    T = transformers
    common = dict(hidden_size=E, intermediate_size=FF, num_hidden_layers=N_LAYER, num_attention_heads=HQ,
                  num_key_value_heads=HKV, max_position_embeddings=128, rms_norm_eps=1e-5,
                  attn_implementation="eager")
    return {
        "gpt2": (T.GPT2LMHeadModel, T.GPT2Config(vocab_size=bpe_v, n_positions=64, n_embd=E, n_layer=N_LAYER,
                                                   n_head=HQ, activation_function="gelu_new",
                                                   layer_norm_epsilon=1e-5, attn_implementation="eager", bos_token_id=eos, eos_token_id=eos,
                                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
        "qwen2": (T.Qwen2ForCausalLM, T.Qwen2Config(vocab_size=bpe_v, tie_word_embeddings=True,
                                                     rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                                                     **common)),
        "qwen3": (T.Qwen3ForCausalLM, T.Qwen3Config(vocab_size=bpe_v, head_dim=16, tie_word_embeddings=False,
                                                     rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                                                     **common)),
        "llama3": (T.LlamaForCausalLM, T.LlamaConfig(
            vocab_size=big_v, tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, **common)),
        "phi3": (T.Phi3ForCausalLM, T.Phi3Config(vocab_size=spm_v, tie_word_embeddings=False, sliding_window=None,
                                                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                   "partial_rotary_factor": 0.5},
                                                  pad_token_id=0, bos_token_id=1, eos_token_id=2, **common)),
        "mistral": (T.MistralForCausalLM, T.MistralConfig(vocab_size=spm_v, tie_word_embeddings=True,
                                                           sliding_window=4, head_dim=E // HQ,
                                                           rope_parameters={"rope_type": "default",
                                                                            "rope_theta": 10000.0},
                                                           **common)),
    }


def feature_effect(name, cls, cfg, seed, prompt, ref):
    """How much the feature under test moves the logits (the same weights without it)."""
    alt = None
    if name == "mistral":
        alt = cfg.__class__(**{**cfg.to_dict(), "sliding_window": None})
    elif name == "llama3":
        alt = cfg.__class__(**{**cfg.to_dict(), "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})
    elif name == "phi3":
        rp = dict(cfg.rope_parameters, partial_rotary_factor=1.0)
        alt = cfg.__class__(**{**cfg.to_dict(), "rope_parameters": rp})
    if alt is None:
        return None
    alt._attn_implementation = "eager"
    torch.manual_seed(0)
    m = cls(alt).eval()
    init_weights(m, seed)
    logits, _ = run_reference(m, prompt)
    return float(np.max(np.abs(logits - ref)) / np.max(np.abs(ref)))


def build(name, cls, cfg, vocab, out_dir):
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    rng = np.random.default_rng(1234)
    low = 3 if vocab["model"] == "llama" else 0
    high = min(vocab["n_normal"], cfg.vocab_size)
    prompt = [int(x) for x in rng.integers(low, high, N_PROMPT)]
    for seed in range(1, 50):
        torch.manual_seed(0)
        model = cls(cfg).eval()
        init_weights(model, seed)
        logits, greedy = run_reference(model, prompt)
        margin = min_margin(logits)
        if margin < MIN_MARGIN:
            continue
        effect = feature_effect(name, cls, cfg, seed, prompt, logits)
        if effect is not None and effect < 0.05:
            continue
        break
    else:
        sys.exit("%s: no seed gave clear greedy margins" % name)
    path = os.path.join(out_dir, name + ".gguf")
    if name == "gpt2":
        w = write_gpt2(path, model, cfg, vocab)
    elif name == "phi3":
        w = write_phi3(path, model, cfg, vocab)
    else:
        arch = "llama" if name in ("llama3", "mistral") else name
        pre = {"qwen2": "qwen2", "qwen3": "qwen2", "llama3": "llama-bpe"}.get(name)

        def extra(ww):
            if name == "mistral":
                ww.add_sliding_window(cfg.sliding_window)

        w = write_llama_like(path, arch, model, cfg, vocab, pre, head_dim, permute=arch == "llama", extra=extra)
        if name == "llama3":
            w.tensor("rope_freqs.weight", llama3_factors(cfg, head_dim))
    w.finish()
    with open(os.path.join(out_dir, name + ".ref"), "wb") as f:
        f.write(b"KLNREF01")
        f.write(struct.pack("<3I", N_PROMPT, N_STEPS, cfg.vocab_size))
        f.write(struct.pack("<%di" % N_PROMPT, *prompt))
        f.write(struct.pack("<%di" % (N_STEPS + 1), *greedy))
        f.write(logits.astype("<f4").tobytes())
    meta = {"architecture": name, "hf_class": cls.__name__, "seed": seed, "prompt": prompt, "greedy": greedy,
            "min_greedy_margin": margin, "feature_effect": effect, "torch": torch.__version__,
            "transformers": transformers.__version__, "config": json.loads(cfg.to_json_string())}
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    print("%-8s seed %d  V %d  margin %.4f  effect %s  -> %s" % (name, seed, cfg.vocab_size, margin, effect, path))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "arch"))
    ap.add_argument("--only", help="comma-separated subset of architectures")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    bpe_tokens, merges = train_bpe(384)
    eos = bpe_tokens.index("<|endoftext|>")
    bpe = {"model": "gpt2", "tokens": bpe_tokens, "merges": merges, "eos": eos, "n_normal": len(bpe_tokens),
           "types": [3 if t == "<|endoftext|>" else 1 for t in bpe_tokens]}
    # Llama 3's large vocabulary, in miniature: the BPE tokens, then reserved special tokens up to 1024.
    big_tokens = bpe_tokens + ["<|reserved_special_token_%d|>" % i for i in range(1024 - len(bpe_tokens))]
    big = dict(bpe, tokens=big_tokens, types=bpe["types"] + [3] * (1024 - len(bpe_tokens)))
    spm_tokens, scores, types = spm_vocab(bpe_tokens)
    spm = {"model": "llama", "tokens": spm_tokens, "scores": scores, "types": types, "n_normal": len(spm_tokens)}
    vocabs = {"gpt2": bpe, "qwen2": bpe, "qwen3": bpe, "llama3": big, "phi3": spm, "mistral": spm}
    cfgs = configs(len(bpe_tokens), len(spm_tokens), len(big_tokens), eos)
    only = set(args.only.split(",")) if args.only else None
    for name, (cls, cfg) in cfgs.items():
        if only and name not in only:
            continue
        build(name, cls, cfg, vocabs[name], args.out)


if __name__ == "__main__":
    main()
