/*
 * gen_model_corpus.c - writes the seed corpus of fuzz_model (and the model fuzz_batch runs) into a
 * directory: one tiny valid model per architecture Kiln loads, each a few KB so that the fuzzer stays fast.
 *
 * Every model has one block, n_embd 8, 2 query heads over 1 KV head (head size 4), n_ff 16 and a context of
 * 16, a 12-to-14-token vocabulary of its family's tokenizer (SentencePiece, byte-level BPE with merges, or
 * WordPiece) and a chat template. Matrices are f16 (q8_0 in the 32-wide llama), norms f32; the values come
 * from a fixed generator, so the files are reproducible. Between them they cover every optional part the
 * loaders know: tied and separate output weights, biases, QK norms, fused QKV and fused gate/up, LayerNorm,
 * learned positions, token types, llama3 rope scaling and a sliding window. Run by hand when the seeds
 * need refreshing:
 *   build-fuzz/fuzz/model_corpus_gen fuzz/corpus/model
 * The files are checked in; see fuzz/README.md.
 */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E 8
#define F 16
#define CTX 16
#define FF(n_embd) ((n_embd) > F ? (n_embd) : F) /* n_ff: 16, or 32 in the 32-wide model (q8_0 rows) */

static int failed;
static uint64_t rng = 0x6b696c6e;

static void check(kiln_status s, const char *what) {
    if (s != KILN_OK) {
        fprintf(stderr, "%s: %s: %s\n", what, kiln_status_name(s), kiln_last_error());
        failed = 1;
    }
}

/* A value in [-0.25, 0.25). */
static float next_value(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) & 0xFFFF) / 65536.0f * 0.5f - 0.25f;
}

/* A tensor of n0 x n1 (n1 = 0: one dimension) values: norms (ones) and biases f32, matrices `type`. */
static void tensor(kiln_gguf_writer *w, const char *name, kiln_type type, int64_t n0, int64_t n1) {
    static uint8_t data[1 << 16];
    static float vals[1 << 14];
    int64_t ne[2] = {n0, n1 > 0 ? n1 : 1}, n = n0 * ne[1];
    bool norm = strstr(name, "norm") != NULL;
    if (n1 == 0 || norm) type = KILN_TYPE_F32;
    for (int64_t i = 0; i < n; i++)
        vals[i] = norm && strstr(name, ".bias") == NULL ? 1.0f : next_value();
    if (type == KILN_TYPE_F32) {
        memcpy(data, vals, (size_t)n * sizeof *vals);
    } else if (type == KILN_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = kiln_fp32_to_fp16(vals[i]);
            memcpy(data + 2 * i, &h, 2);
        }
    } else {
        size_t row = 0;
        check(kiln_type_row_bytes(type, n0, &row), name);
        for (int64_t r = 0; r < ne[1]; r++)
            check(kiln_quantize_row(type, vals + r * n0, data + (size_t)r * row, n0), name);
    }
    check(kiln_gguf_writer_add_tensor(w, name, type, n1 > 0 ? 2 : 1, ne, data), name);
}

static void key_u32(kiln_gguf_writer *w, const char *arch, const char *suffix, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    check(kiln_gguf_writer_add_scalar(w, key, KILN_GGUF_UINT32, &v), key);
}

static void key_str(kiln_gguf_writer *w, const char *key, const char *v) {
    check(kiln_gguf_writer_add_str(w, key, v, strlen(v)), key);
}

/* The hyperparameters every architecture reads. */
static void hparams(kiln_gguf_writer *w, const char *arch, int64_t n_embd) {
    key_str(w, "general.architecture", arch);
    key_u32(w, arch, "context_length", CTX);
    key_u32(w, arch, "embedding_length", (uint32_t)n_embd);
    key_u32(w, arch, "block_count", 1);
    key_u32(w, arch, "feed_forward_length", (uint32_t)FF(n_embd));
    key_u32(w, arch, "attention.head_count", 2);
    key_u32(w, arch, "attention.head_count_kv", 1);
}

static void str_array(kiln_gguf_writer *w, const char *key, const char *const *s, size_t n) {
    kiln_str strs[32];
    for (size_t i = 0; i < n; i++)
        strs[i] = (kiln_str){s[i], strlen(s[i])};
    check(kiln_gguf_writer_add_str_array(w, key, strs, n), key);
}

/* The tokenizer keys; returns the vocabulary size. */
static int64_t vocab(kiln_gguf_writer *w, const char *model) {
    static const char *const spm[] = {"<unk>",
                                      "<s>",
                                      "</s>",
                                      "\xe2\x96\x81",
                                      "a",
                                      "b",
                                      ("\xe2\x96\x81"
                                       "a"),
                                      "ab",
                                      "<0x0A>",
                                      "<|im_start|>",
                                      "<|im_end|>",
                                      "[INST]"};
    static const int32_t spm_types[] = {2, 3, 3, 1, 1, 1, 1, 1, 6, 4, 4, 4};
    static const char *const bpe[] = {"a",
                                      "b",
                                      "c",
                                      "\xc4\xa0",
                                      ("\xc4\xa0"
                                       "a"),
                                      "ab",
                                      "\xc4\x8a",
                                      "<|endoftext|>",
                                      "<|im_start|>",
                                      "<|im_end|>",
                                      "<|end|>",
                                      "<|user|>",
                                      "<|assistant|>"};
    static const int32_t bpe_types[] = {1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3};
    static const char *const merges[] = {"\xc4\xa0 a", "a b"};
    static const char *const wpm[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a",
                                      "b",     "##b",   "ab",    "hello", "##lo",   "!"};
    static const int32_t wpm_types[] = {3, 2, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1};
    const char *const *tokens;
    const int32_t *types;
    size_t n;
    uint32_t bos = 1, eos = 2;
    float scores[32];
    key_str(w, "tokenizer.ggml.model", model);
    if (strcmp(model, "llama") == 0) {
        tokens = spm, types = spm_types, n = sizeof spm / sizeof *spm;
    } else if (strcmp(model, "gpt2") == 0) {
        tokens = bpe, types = bpe_types, n = sizeof bpe / sizeof *bpe, bos = eos = 7;
        str_array(w, "tokenizer.ggml.merges", merges, 2);
    } else {
        tokens = wpm, types = wpm_types, n = sizeof wpm / sizeof *wpm;
        check(kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.cls_token_id", KILN_GGUF_UINT32, &bos), "cls");
        bos = 3;
        check(kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.seperator_token_id", KILN_GGUF_UINT32, &bos),
              "sep");
        bos = 2, eos = 3;
    }
    for (size_t i = 0; i < n; i++)
        scores[i] = -(float)i;
    str_array(w, "tokenizer.ggml.tokens", tokens, n);
    check(kiln_gguf_writer_add_array(w, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, scores, n), "scores");
    check(kiln_gguf_writer_add_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types, n), "types");
    if (strcmp(model, "bert") != 0) {
        check(kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.bos_token_id", KILN_GGUF_UINT32, &bos), "bos");
        check(kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.eos_token_id", KILN_GGUF_UINT32, &eos), "eos");
    }
    return (int64_t)n;
}

/* A block's tensors. Flags choose the optional parts. */
enum {
    FUSED_QKV = 1,
    QKV_BIAS = 2,
    OUT_BIAS = 4,
    FFN_BIAS = 8,
    QK_NORM = 16,
    LAYER_NORM = 32,
    GATE = 64,
    FUSED_UP = 128,
    POST_NORM = 256
};

static void block(kiln_gguf_writer *w, unsigned f, kiln_type type, int64_t n_embd) {
    const int64_t D = n_embd / 2, Eq = 2 * D, Ekv = D, ff = FF(n_embd), up = f & FUSED_UP ? 2 * ff : ff;
    const char *an = f & POST_NORM ? "blk.0.attn_output_norm" : "blk.0.attn_norm";
    const char *fn = f & POST_NORM ? "blk.0.layer_output_norm" : "blk.0.ffn_norm";
    char name[64];
    snprintf(name, sizeof name, "%s.weight", an), tensor(w, name, type, n_embd, 0);
    if (f & LAYER_NORM) snprintf(name, sizeof name, "%s.bias", an), tensor(w, name, type, n_embd, 0);
    if (f & FUSED_QKV) {
        tensor(w, "blk.0.attn_qkv.weight", type, n_embd, Eq + 2 * Ekv);
        if (f & QKV_BIAS) tensor(w, "blk.0.attn_qkv.bias", type, Eq + 2 * Ekv, 0);
    } else {
        tensor(w, "blk.0.attn_q.weight", type, n_embd, Eq);
        tensor(w, "blk.0.attn_k.weight", type, n_embd, Ekv);
        tensor(w, "blk.0.attn_v.weight", type, n_embd, Ekv);
        if (f & QKV_BIAS) {
            tensor(w, "blk.0.attn_q.bias", type, Eq, 0);
            tensor(w, "blk.0.attn_k.bias", type, Ekv, 0);
            tensor(w, "blk.0.attn_v.bias", type, Ekv, 0);
        }
    }
    if (f & QK_NORM) {
        tensor(w, "blk.0.attn_q_norm.weight", type, D, 0);
        tensor(w, "blk.0.attn_k_norm.weight", type, D, 0);
    }
    tensor(w, "blk.0.attn_output.weight", type, Eq, n_embd);
    if (f & OUT_BIAS) tensor(w, "blk.0.attn_output.bias", type, n_embd, 0);
    snprintf(name, sizeof name, "%s.weight", fn), tensor(w, name, type, n_embd, 0);
    if (f & LAYER_NORM) snprintf(name, sizeof name, "%s.bias", fn), tensor(w, name, type, n_embd, 0);
    if (f & GATE) tensor(w, "blk.0.ffn_gate.weight", type, n_embd, ff);
    tensor(w, "blk.0.ffn_up.weight", type, n_embd, up);
    tensor(w, "blk.0.ffn_down.weight", type, ff, n_embd);
    if (f & FFN_BIAS) {
        tensor(w, "blk.0.ffn_up.bias", type, up, 0);
        tensor(w, "blk.0.ffn_down.bias", type, n_embd, 0);
    }
}

/* token_embd, output_norm (with its bias for LayerNorm) and, unless tied, output. */
static void common(kiln_gguf_writer *w, kiln_type type, int64_t n_embd, int64_t n_vocab, unsigned f,
                   bool tied) {
    tensor(w, "token_embd.weight", type, n_embd, n_vocab);
    tensor(w, "output_norm.weight", type, n_embd, 0);
    if (f & LAYER_NORM) tensor(w, "output_norm.bias", type, n_embd, 0);
    if (!tied) tensor(w, "output.weight", type, n_embd, n_vocab);
}

static void emit(kiln_gguf_writer *w, const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    check(kiln_gguf_writer_write_file(w, path), path);
    kiln_gguf_writer_destroy(w);
}

static kiln_gguf_writer *new_writer(void) {
    kiln_gguf_writer *w = NULL;
    check(kiln_gguf_writer_create(&w), "create");
    if (!w) exit(1);
    return w;
}

/* Llama 3: tied embedding, rope scaling "llama3", the llama3 chat template. */
static void llama3(const char *dir) {
    kiln_gguf_writer *w = new_writer();
    float factor = 8.0f;
    hparams(w, "llama", E);
    key_str(w, "llama.rope.scaling.type", "llama3");
    check(kiln_gguf_writer_add_scalar(w, "llama.rope.scaling.factor", KILN_GGUF_FLOAT32, &factor), "factor");
    key_u32(w, "llama", "rope.scaling.original_context_length", 8);
    key_str(w, "tokenizer.chat_template", "{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}");
    int64_t n_vocab = vocab(w, "llama");
    common(w, KILN_TYPE_F16, E, n_vocab, 0, true);
    block(w, GATE, KILN_TYPE_F16, E);
    emit(w, dir, "llama3_tied.gguf");
}

/* Llama, 32 wide so that the matrices can be q8_0; a separate output, attention biases, no template. */
static void llama_q8_0(const char *dir) {
    kiln_gguf_writer *w = new_writer();
    hparams(w, "llama", 32);
    int64_t n_vocab = vocab(w, "llama");
    common(w, KILN_TYPE_Q8_0, 32, n_vocab, 0, false);
    block(w, GATE | QKV_BIAS | OUT_BIAS, KILN_TYPE_Q8_0, 32);
    emit(w, dir, "llama_q8_0.gguf");
}

/* Mistral: a llama with a sliding window and the [INST] template. */
static void mistral(const char *dir) {
    kiln_gguf_writer *w = new_writer();
    hparams(w, "llama", E);
    key_u32(w, "llama", "attention.sliding_window", 2);
    key_str(w, "tokenizer.chat_template", "{{ '[INST] ' + content + ' [/INST]' }}");
    int64_t n_vocab = vocab(w, "llama");
    common(w, KILN_TYPE_F16, E, n_vocab, 0, false);
    block(w, GATE, KILN_TYPE_F16, E);
    emit(w, dir, "mistral.gguf");
}

static void qwen(const char *dir, const char *arch, unsigned f, const char *name) {
    kiln_gguf_writer *w = new_writer();
    hparams(w, arch, E);
    if (f & QK_NORM)
        key_u32(w, arch, "attention.key_length", E / 2), key_u32(w, arch, "attention.value_length", E / 2);
    key_str(w, "tokenizer.ggml.pre", "qwen2");
    key_str(w, "tokenizer.chat_template", "{{ '<|im_start|>' + role + '\\n' + content + '<|im_end|>' }}");
    int64_t n_vocab = vocab(w, "gpt2");
    common(w, KILN_TYPE_F16, E, n_vocab, 0, (f & QK_NORM) != 0);
    block(w, GATE | f, KILN_TYPE_F16, E);
    emit(w, dir, name);
}

/* Phi-3: fused QKV and fused gate/up, the phi3 template. */
static void phi3(const char *dir) {
    kiln_gguf_writer *w = new_writer();
    hparams(w, "phi3", E);
    key_u32(w, "phi3", "rope.dimension_count", E / 2);
    key_str(w, "tokenizer.chat_template", "{{ '<|user|>' + content + '<|end|>' + '<|assistant|>' }}");
    int64_t n_vocab = vocab(w, "llama");
    common(w, KILN_TYPE_F16, E, n_vocab, 0, false);
    block(w, FUSED_QKV | FUSED_UP, KILN_TYPE_F16, E);
    emit(w, dir, "phi3.gguf");
}

/* GPT-2: LayerNorm, learned positions, fused QKV, every bias, GELU. */
static void gpt2(const char *dir) {
    kiln_gguf_writer *w = new_writer();
    float eps = 1e-5f;
    hparams(w, "gpt2", E);
    check(kiln_gguf_writer_add_scalar(w, "gpt2.attention.layer_norm_epsilon", KILN_GGUF_FLOAT32, &eps),
          "eps");
    key_str(w, "tokenizer.ggml.pre", "gpt-2");
    int64_t n_vocab = vocab(w, "gpt2");
    common(w, KILN_TYPE_F16, E, n_vocab, LAYER_NORM, true);
    tensor(w, "position_embd.weight", KILN_TYPE_F16, E, CTX);
    block(w, FUSED_QKV | QKV_BIAS | OUT_BIAS | FFN_BIAS | LAYER_NORM, KILN_TYPE_F16, E);
    emit(w, dir, "gpt2.gguf");
}

/* BERT: an encoder (not causal, mean pooling), WordPiece, token types, post-norm blocks. */
static void bert(const char *dir) {
    kiln_gguf_writer *w = new_writer();
    uint8_t causal = 0;
    uint32_t pooling = 1;
    hparams(w, "bert", E);
    check(kiln_gguf_writer_add_scalar(w, "bert.attention.causal", KILN_GGUF_BOOL, &causal), "causal");
    check(kiln_gguf_writer_add_scalar(w, "bert.pooling_type", KILN_GGUF_UINT32, &pooling), "pooling");
    int64_t n_vocab = vocab(w, "bert");
    tensor(w, "token_embd.weight", KILN_TYPE_F16, E, n_vocab);
    tensor(w, "position_embd.weight", KILN_TYPE_F16, E, CTX);
    tensor(w, "token_types.weight", KILN_TYPE_F16, E, 2);
    tensor(w, "token_embd_norm.weight", KILN_TYPE_F32, E, 0);
    tensor(w, "token_embd_norm.bias", KILN_TYPE_F32, E, 0);
    block(w, QKV_BIAS | OUT_BIAS | FFN_BIAS | LAYER_NORM | POST_NORM, KILN_TYPE_F16, E);
    emit(w, dir, "bert.gguf");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    llama3(argv[1]);
    llama_q8_0(argv[1]);
    mistral(argv[1]);
    qwen(argv[1], "qwen2", QKV_BIAS, "qwen2.gguf");
    qwen(argv[1], "qwen3", QK_NORM, "qwen3_tied.gguf");
    phi3(argv[1]);
    gpt2(argv[1]);
    bert(argv[1]);
    return failed;
}
