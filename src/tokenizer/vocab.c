/*
 * vocab.c - building a kiln_vocab from the tokenizer.* keys of a GGUF file, with every field validated.
 *
 * Keys read, and what happens when one is absent:
 *   tokenizer.ggml.model             STRING, required. "llama" (SentencePiece), "gpt2" (byte-level BPE) and
 *                                    "bert" (WordPiece) are tokenized; "t5" and "rwkv" load (token texts
 *                                    can be inspected) but kiln_tokenize / kiln_detok_create fail with
 *                                    KILN_E_UNSUPPORTED; any other string fails here with
 *                                    KILN_E_UNSUPPORTED.
 *   tokenizer.ggml.pre, .merges      "gpt2" only: read by kiln__bpe_prepare (bpe.c).
 *   tokenizer.ggml.tokens            ARRAY of STRING, required, at least one token.
 *   tokenizer.ggml.scores            ARRAY of FLOAT32, optional (every score 0); no NaN.
 *   tokenizer.ggml.token_type        ARRAY of INT32, optional (every token NORMAL); values 1..6. A BYTE
 *                                    token's text must read "<0xXX>".
 *   tokenizer.ggml.bos_token_id,     any integer type, optional (-1 = none); a present value must be
 *   tokenizer.ggml.eos_token_id      a token id, so 0xFFFFFFFF is an error.
 *   tokenizer.ggml.unknown_token_id  as above; when absent, the first token of type UNKNOWN, else -1.
 *   tokenizer.ggml.cls_token_id,     "bert" only, as above: BOS and EOS when bos_token_id / eos_token_id
 *   tokenizer.ggml.seperator_token_id  are absent ([CLS] and [SEP], as llama.cpp's converter names them).
 *   tokenizer.ggml.add_bos_token     BOOL, optional: true for "llama" and "bert", false for the others.
 *   tokenizer.ggml.add_eos_token     BOOL, optional: else add_sep_token, else true for "bert" ([SEP] ends
 *                                    its sequences), false for the others.
 *   tokenizer.ggml.add_space_prefix  BOOL, optional: true.
 * The arrays must all have the same length. The vocab copies what it keeps; the file may be closed.
 */
#include "tokenizer/vocab.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *model;
    kiln__vocab_kind kind;
    bool add_bos_default;
} known_models[] = {
    {"llama", KILN__VOCAB_SPM, true}, {"gpt2", KILN__VOCAB_BPE, false},  {"bert", KILN__VOCAB_WPM, true},
    {"t5", KILN__VOCAB_UGM, false},   {"rwkv", KILN__VOCAB_RWKV, false},
};

static const char *gguf_type_name(kiln_gguf_type t) {
    static const char *names[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                  "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
    return (unsigned)t < KILN__ARRAY_LEN(names) ? names[t] : "(invalid type)";
}

static uint64_t hash_bytes(const char *s, size_t len) {
    return kiln__fnv1a(KILN__FNV_BASIS, s, len);
}

int32_t kiln__vocab_find(const kiln_vocab *vocab, const char *s, size_t len) {
    size_t slot = (size_t)hash_bytes(s, len) & vocab->bucket_mask;
    for (;;) {
        int32_t id = vocab->buckets[slot];
        if (id < 0) return -1;
        const kiln_str *t = &vocab->texts[id];
        if (t->len == len && memcmp(t->data, s, len) == 0) return id;
        slot = (slot + 1) & vocab->bucket_mask;
    }
}

/* Find an array key of the given element type. Sets *index = -1 when absent and not required. */
static kiln_status find_array(const kiln_gguf *g, const char *key, kiln_gguf_type elem, bool required,
                              int64_t *index) {
    int64_t i = kiln_gguf_find_key(g, key);
    *index = i;
    if (i < 0) {
        if (required) return kiln__error(KILN_E_NOT_FOUND, "vocab: required key '%s' is missing", key);
        return KILN_OK;
    }
    if (kiln_gguf_kv_type(g, i) != KILN_GGUF_ARRAY)
        return kiln__error(KILN_E_FORMAT, "vocab: '%s' has type %s, expected an ARRAY of %s", key,
                           gguf_type_name(kiln_gguf_kv_type(g, i)), gguf_type_name(elem));
    if (kiln_gguf_arr_type(g, i) != elem)
        return kiln__error(KILN_E_FORMAT, "vocab: '%s' is an ARRAY of %s, expected an ARRAY of %s", key,
                           gguf_type_name(kiln_gguf_arr_type(g, i)), gguf_type_name(elem));
    return KILN_OK;
}

/* A numeric array must match the token count; returns its raw storage in *data. */
static kiln_status numeric_array(const kiln_gguf *g, int64_t i, const char *key, int32_t n_tokens,
                                 const void **data) {
    uint64_t len = kiln_gguf_arr_len(g, i);
    if (len != (uint64_t)n_tokens)
        return kiln__error(KILN_E_FORMAT, "vocab: '%s' has %llu entries but tokenizer.ggml.tokens has %d",
                           key, (unsigned long long)len, n_tokens);
    *data = kiln_gguf_arr_data(g, i);
    if (!*data) return kiln__error(KILN_E_FORMAT, "vocab: '%s' has no element data", key);
    return KILN_OK;
}

static kiln_status read_model(const kiln_gguf *g, kiln_vocab *v, bool *add_bos_default) {
    kiln_str s;
    kiln_status st = kiln_gguf_get_str(g, "tokenizer.ggml.model", &s);
    if (st == KILN_E_NOT_FOUND)
        return kiln__error(st, "vocab: required key 'tokenizer.ggml.model' is missing");
    if (st != KILN_OK) return kiln__error_prefix(st, "vocab: ");
    for (size_t k = 0; k < KILN__ARRAY_LEN(known_models); k++) {
        if (strlen(known_models[k].model) == s.len && memcmp(known_models[k].model, s.data, s.len) == 0) {
            v->kind = known_models[k].kind;
            *add_bos_default = known_models[k].add_bos_default;
            v->model = kiln__strndup(s.data, s.len);
            return v->model ? KILN_OK : kiln__nomem("the tokenizer model name");
        }
    }
    return kiln__error(KILN_E_UNSUPPORTED,
                       "vocab: tokenizer model '%.*s' is not supported (known: llama, gpt2, bert, t5, rwkv)",
                       (int)KILN__MIN(s.len, 64), s.data);
}

/* Copy every token text into one blob, each followed by a NUL. */
static kiln_status read_tokens(const kiln_gguf *g, kiln_vocab *v) {
    int64_t idx;
    kiln_status st = find_array(g, "tokenizer.ggml.tokens", KILN_GGUF_STRING, true, &idx);
    if (st != KILN_OK) return st;
    uint64_t n = kiln_gguf_arr_len(g, idx);
    if (n == 0) return kiln__error(KILN_E_FORMAT, "vocab: 'tokenizer.ggml.tokens' is empty");
    if (n > (uint64_t)KILN_MAX_VOCAB)
        return kiln__error(
            KILN_E_FORMAT,
            "vocab: 'tokenizer.ggml.tokens' has %llu entries, over the limit of %d (KILN_MAX_VOCAB)",
            (unsigned long long)n, KILN_MAX_VOCAB);
    v->n_tokens = (int32_t)n;
    v->texts = kiln__alloc_array((size_t)n, sizeof *v->texts);
    if (!v->texts) return kiln__nomem("token texts");
    size_t total = 0;
    for (uint64_t j = 0; j < n; j++) {
        st = kiln_gguf_arr_str(g, idx, j, &v->texts[j]);
        if (st != KILN_OK)
            return kiln__error_prefix(st, "vocab: tokenizer.ggml.tokens[%llu]: ", (unsigned long long)j);
        if (kiln__add_overflow_size(total, v->texts[j].len, &total) ||
            kiln__add_overflow_size(total, 1, &total))
            return kiln__error(KILN_E_FORMAT, "vocab: token texts overflow the address space");
        v->max_token_len = KILN__MAX(v->max_token_len, v->texts[j].len);
    }
    v->blob = kiln__alloc(total);
    if (!v->blob) return kiln__nomem("token texts");
    char *p = v->blob;
    for (uint64_t j = 0; j < n; j++) {
        if (v->texts[j].len) memcpy(p, v->texts[j].data, v->texts[j].len);
        p[v->texts[j].len] = '\0';
        v->texts[j].data = p;
        p += v->texts[j].len + 1;
    }
    return KILN_OK;
}

static kiln_status read_scores(const kiln_gguf *g, kiln_vocab *v) {
    int64_t idx;
    const void *data;
    v->scores = kiln__calloc((size_t)v->n_tokens, sizeof *v->scores);
    if (!v->scores) return kiln__nomem("token scores");
    kiln_status st = find_array(g, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, false, &idx);
    if (st != KILN_OK || idx < 0) return st;
    st = numeric_array(g, idx, "tokenizer.ggml.scores", v->n_tokens, &data);
    if (st != KILN_OK) return st;
    memcpy(v->scores, data, (size_t)v->n_tokens * sizeof *v->scores); /* little-endian host assumed */
    for (int32_t j = 0; j < v->n_tokens; j++) {
        if (v->scores[j] != v->scores[j])
            return kiln__error(KILN_E_FORMAT, "vocab: tokenizer.ggml.scores[%d] is NaN", j);
    }
    return KILN_OK;
}

static kiln_status read_types(const kiln_gguf *g, kiln_vocab *v) {
    int64_t idx;
    const void *data;
    v->attrs = kiln__alloc((size_t)v->n_tokens);
    if (!v->attrs) return kiln__nomem("token types");
    memset(v->attrs, KILN_TOKEN_NORMAL, (size_t)v->n_tokens);
    kiln_status st = find_array(g, "tokenizer.ggml.token_type", KILN_GGUF_INT32, false, &idx);
    if (st != KILN_OK || idx < 0) return st;
    st = numeric_array(g, idx, "tokenizer.ggml.token_type", v->n_tokens, &data);
    if (st != KILN_OK) return st;
    for (int32_t j = 0; j < v->n_tokens; j++) {
        int32_t t;
        memcpy(&t, (const char *)data + (size_t)j * sizeof t, sizeof t);
        if (t < KILN_TOKEN_NORMAL || t > KILN_TOKEN_BYTE)
            return kiln__error(KILN_E_FORMAT,
                               "vocab: tokenizer.ggml.token_type[%d] = %d is not a token type (1..6)", j, t);
        v->attrs[j] = (uint8_t)t;
    }
    return KILN_OK;
}

static kiln_status build_index(kiln_vocab *v) {
    size_t buckets = 16;
    while (buckets < (size_t)v->n_tokens * 2)
        buckets *= 2; /* n_tokens < 2^31: no overflow on 64-bit */
    v->buckets = kiln__alloc_array(buckets, sizeof *v->buckets);
    if (!v->buckets) return kiln__nomem("the token index");
    memset(v->buckets, 0xff, buckets * sizeof *v->buckets);
    v->bucket_mask = buckets - 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const kiln_str *t = &v->texts[id];
        size_t slot = (size_t)hash_bytes(t->data, t->len) & v->bucket_mask;
        while (v->buckets[slot] >= 0) {
            const kiln_str *o = &v->texts[v->buckets[slot]];
            if (o->len == t->len && memcmp(o->data, t->data, t->len) == 0) break; /* last id wins */
            slot = (slot + 1) & v->bucket_mask;
        }
        v->buckets[slot] = id;
    }
    return KILN_OK;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Decode the byte of every BYTE token and choose the token for each raw byte. */
static kiln_status map_bytes(kiln_vocab *v) {
    v->token_byte = kiln__alloc_array((size_t)v->n_tokens, sizeof *v->token_byte);
    if (!v->token_byte) return kiln__nomem("byte tokens");
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const kiln_str *t = &v->texts[id];
        v->token_byte[id] = -1;
        if (v->attrs[id] != KILN_TOKEN_BYTE) continue;
        int hi = t->len == 6 ? hex_value(t->data[3]) : -1, lo = t->len == 6 ? hex_value(t->data[4]) : -1;
        if (hi < 0 || lo < 0 || memcmp(t->data, "<0x", 3) != 0 || t->data[5] != '>')
            return kiln__error(KILN_E_FORMAT,
                               "vocab: token %d has type BYTE but its text '%.*s' is not <0xXX>", id,
                               (int)KILN__MIN(t->len, 32), t->data);
        v->token_byte[id] = (int16_t)(hi * 16 + lo);
    }
    for (int b = 0; b < 256; b++) {
        char name[8], one = (char)b;
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t id = kiln__vocab_find(v, name, 6);
        if (id < 0) id = kiln__vocab_find(v, &one, 1);
        v->byte_to_id[b] = id >= 0 ? id : v->unk;
        v->byte_values[b] = (uint8_t)b;
    }
    return KILN_OK;
}

/* An optional token-id key: absent keeps *out; present must name a token. */
static kiln_status read_token_id(const kiln_gguf *g, const char *key, int32_t n_tokens, int32_t *out) {
    int64_t value;
    if (kiln_gguf_find_key(g, key) < 0) return KILN_OK;
    kiln_status st = kiln_gguf_get_int(g, key, &value);
    if (st != KILN_OK) return kiln__error_prefix(st, "vocab: ");
    if (value < 0 || value >= n_tokens)
        return kiln__error(KILN_E_FORMAT, "vocab: %s = %lld is not a token id (the vocabulary has %d tokens)",
                           key, (long long)value, n_tokens);
    *out = (int32_t)value;
    return KILN_OK;
}

static kiln_status read_bool(const kiln_gguf *g, const char *key, bool fallback, bool *out) {
    *out = fallback;
    if (kiln_gguf_find_key(g, key) < 0) return KILN_OK;
    kiln_status st = kiln_gguf_get_bool(g, key, out);
    return st == KILN_OK ? KILN_OK : kiln__error_prefix(st, "vocab: ");
}

static kiln_status read_specials(const kiln_gguf *g, kiln_vocab *v, bool add_bos_default) {
    kiln_status st;
    bool wpm = v->kind == KILN__VOCAB_WPM, add_sep = wpm;
    if (wpm && ((st = read_token_id(g, "tokenizer.ggml.cls_token_id", v->n_tokens, &v->bos)) != KILN_OK ||
                (st = read_token_id(g, "tokenizer.ggml.seperator_token_id", v->n_tokens, &v->eos)) != KILN_OK))
        return st;
    if ((st = read_token_id(g, "tokenizer.ggml.bos_token_id", v->n_tokens, &v->bos)) != KILN_OK) return st;
    if ((st = read_token_id(g, "tokenizer.ggml.eos_token_id", v->n_tokens, &v->eos)) != KILN_OK) return st;
    for (int32_t id = 0; id < v->n_tokens && v->unk < 0; id++) {
        if (v->attrs[id] == KILN_TOKEN_UNKNOWN) v->unk = id;
    }
    if ((st = read_token_id(g, "tokenizer.ggml.unknown_token_id", v->n_tokens, &v->unk)) != KILN_OK)
        return st;
    if ((st = read_bool(g, "tokenizer.ggml.add_bos_token", add_bos_default, &v->add_bos)) != KILN_OK ||
        (st = read_bool(g, "tokenizer.ggml.add_sep_token", add_sep, &add_sep)) != KILN_OK ||
        (st = read_bool(g, "tokenizer.ggml.add_eos_token", add_sep, &v->add_eos)) != KILN_OK)
        return st;
    return read_bool(g, "tokenizer.ggml.add_space_prefix", true, &v->add_space_prefix);
}

kiln_status kiln_vocab_create(const kiln_gguf *gguf, kiln_vocab **out) {
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_vocab_create: out is NULL");
    *out = NULL;
    if (!gguf) return kiln__error(KILN_E_INVALID_ARG, "kiln_vocab_create: gguf is NULL");
    kiln_vocab *v = kiln__calloc(1, sizeof *v);
    if (!v) return kiln__nomem("the vocabulary");
    v->bos = v->eos = v->unk = -1;
    bool add_bos_default = false;
    kiln_status st = read_model(gguf, v, &add_bos_default);
    if (st == KILN_OK) st = read_tokens(gguf, v);
    if (st == KILN_OK) st = read_scores(gguf, v);
    if (st == KILN_OK) st = read_types(gguf, v);
    if (st == KILN_OK) st = build_index(v);
    if (st == KILN_OK) st = read_specials(gguf, v, add_bos_default);
    if (st == KILN_OK) st = map_bytes(v);
    if (st == KILN_OK) st = kiln__specials_build(v);
    if (st == KILN_OK && v->kind == KILN__VOCAB_BPE) st = kiln__bpe_prepare(gguf, v);
    if (st != KILN_OK) {
        kiln_vocab_destroy(v);
        return st;
    }
    *out = v;
    return KILN_OK;
}

void kiln_vocab_destroy(kiln_vocab *vocab) {
    if (!vocab) return;
    kiln__dealloc(vocab->model);
    kiln__dealloc(vocab->texts);
    kiln__dealloc(vocab->blob);
    kiln__dealloc(vocab->scores);
    kiln__dealloc(vocab->attrs);
    kiln__dealloc(vocab->token_byte);
    kiln__dealloc(vocab->buckets);
    kiln__dealloc(vocab->specials);
    kiln__dealloc(vocab->pre);
    kiln__dealloc(vocab->merges);
    kiln__dealloc(vocab->merge_blob);
    kiln__dealloc(vocab->merge_buckets);
    kiln__dealloc(vocab->pieces);
    kiln__dealloc(vocab->piece_blob);
    kiln__dealloc(vocab);
}

int32_t kiln_vocab_n_tokens(const kiln_vocab *vocab) {
    return vocab ? vocab->n_tokens : 0;
}
int32_t kiln_vocab_bos(const kiln_vocab *vocab) {
    return vocab ? vocab->bos : -1;
}
int32_t kiln_vocab_eos(const kiln_vocab *vocab) {
    return vocab ? vocab->eos : -1;
}
bool kiln_vocab_add_bos(const kiln_vocab *vocab) {
    return vocab ? vocab->add_bos : false;
}
bool kiln_vocab_add_eos(const kiln_vocab *vocab) {
    return vocab ? vocab->add_eos : false;
}

kiln_str kiln_vocab_token_text(const kiln_vocab *vocab, int32_t id) {
    kiln_str none = {"", 0};
    if (!vocab || id < 0 || id >= vocab->n_tokens) return none;
    return vocab->texts[id];
}

int32_t kiln_vocab_find_token(const kiln_vocab *vocab, const char *text, size_t len) {
    if (!vocab || (!text && len > 0)) return -1;
    return kiln__vocab_find(vocab, text ? text : "", len);
}

int32_t kiln_vocab_token_attr(const kiln_vocab *vocab, int32_t id) {
    if (!vocab || id < 0 || id >= vocab->n_tokens) return 0;
    return vocab->attrs[id];
}
