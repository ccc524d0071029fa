/*
 * bpe.c - byte-level BPE ("gpt2" vocabularies) with llama.cpp's semantics.
 *
 * Vocabulary preparation (kiln__bpe_prepare): tokenizer.ggml.pre selects the pre-tokenizer (pretok.h; an
 * absent key means "default", an unknown name loads but cannot tokenize); tokenizer.ggml.merges, an ARRAY
 * of STRING "left right" (split at the first space after the first byte), gives each merge its rank, its
 * index; a repeated merge keeps its first rank. Each token's text is decoded to the bytes it stands for.
 *
 * Tokenizing one piece of text:
 * 1. The pre-tokenizer splits it into words.
 * 2. Each word's bytes are spelled with GPT-2's byte-to-unicode table (bytes_to_unicode: the printable
 *    bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, the other 68 bytes in order for
 *    U+0100, U+0101, ...), one symbol per byte.
 * 3. With ignore_merges (Llama 3), a word whose spelling is a token is emitted whole.
 * 4. Every adjacent pair with a merge goes into the bigram heap (lowest rank first, ties to the leftmost
 *    pair; bigram_heap.h). Pop until empty, skipping stale pairs, merging the pair and pushing the pairs
 *    it forms with its neighbours.
 * 5. Each remaining symbol is emitted as its token; a symbol that is not a token (only possible with odd
 *    vocabularies) is emitted as whichever of its single bytes are tokens, as llama.cpp does.
 *
 * Detokenizing: NORMAL tokens print their decoded bytes, USER_DEFINED and UNKNOWN tokens their text as is,
 * BYTE tokens their byte, CONTROL and UNUSED tokens nothing. Byte-level BPE is lossless: any bytes, valid
 * UTF-8 or not, tokenize and detokenize back to themselves.
 */
#include "tokenizer/unicode.h"
#include "tokenizer/bigram_heap.h"
#include "tokenizer/vocab.h"

#include <pthread.h>
#include <string.h>

/* bytes_to_unicode: the code point that spells byte b. */
static uint32_t byte_to_cp(uint8_t b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    uint32_t n = 0; /* b is the n-th byte that needs a stand-in */
    for (uint32_t k = 0; k < b; k++)
        if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE)) n++;
    return 256 + n;
}

typedef struct byte_map {
    char spell[256][2]; /* UTF-8 of byte_to_cp */
    uint8_t spell_len[256];
    int16_t cp_to_byte[256 + 68]; /* the inverse, -1 where none */
} byte_map;

/* The map is the same for every vocabulary: built once (pthread_once) and shared. Rebuilding it per
 * kiln_tokenize call was most of fuzz_tokenizer's time (perf: 30%, with coverage tracing). */
static byte_map the_byte_map;
static pthread_once_t byte_map_once = PTHREAD_ONCE_INIT;

static void byte_map_init(byte_map *m) {
    for (size_t i = 0; i < KILN__ARRAY_LEN(m->cp_to_byte); i++)
        m->cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = byte_to_cp((uint8_t)b);
        char tmp[4];
        m->spell_len[b] = (uint8_t)kiln__utf8_encode(cp, tmp);
        memcpy(m->spell[b], tmp, m->spell_len[b]);
        m->cp_to_byte[cp] = (int16_t)b;
    }
}

static void byte_map_build(void) { byte_map_init(&the_byte_map); }

static const byte_map *byte_map_get(void) {
    pthread_once(&byte_map_once, byte_map_build);
    return &the_byte_map;
}

/* ---- vocabulary preparation ---- */

static kiln_status read_pre(const kiln_gguf *g, kiln_vocab *v) {
    kiln_str s = {"default", 7};
    if (kiln_gguf_find_key(g, "tokenizer.ggml.pre") >= 0) {
        kiln_status st = kiln_gguf_get_str(g, "tokenizer.ggml.pre", &s);
        if (st != KILN_OK) return kiln__error_prefix(st, "vocab: ");
    }
    v->pre = kiln__strndup(s.data, s.len);
    if (!v->pre) return kiln__nomem("the pre-tokenizer name");
    v->pretok = kiln__pretok_from_name(s.data, s.len);
    v->ignore_merges = v->pretok == KILN__PRETOK_LLAMA3;
    return KILN_OK;
}

static kiln_status index_merges(kiln_vocab *v) {
    size_t buckets = 16;
    while (buckets < (size_t)v->n_merges * 2)
        buckets *= 2;
    v->merge_buckets = kiln__alloc_array(buckets, sizeof *v->merge_buckets);
    if (!v->merge_buckets) return kiln__nomem("the merge index");
    memset(v->merge_buckets, 0xff, buckets * sizeof *v->merge_buckets);
    v->merge_mask = buckets - 1;
    for (int32_t r = 0; r < v->n_merges; r++) {
        const kiln_str *m = &v->merges[r];
        size_t slot = (size_t)kiln__fnv1a(KILN__FNV_BASIS, m->data, m->len) & v->merge_mask;
        bool repeated = false;
        while (v->merge_buckets[slot] >= 0 && !repeated) {
            const kiln_str *o = &v->merges[v->merge_buckets[slot]];
            repeated = o->len == m->len && memcmp(o->data, m->data, m->len) == 0;
            slot = (slot + 1) & v->merge_mask;
        }
        if (!repeated) v->merge_buckets[slot] = r; /* the first rank wins */
    }
    return KILN_OK;
}

static kiln_status read_merges(const kiln_gguf *g, kiln_vocab *v) {
    int64_t idx = kiln_gguf_find_key(g, "tokenizer.ggml.merges");
    v->n_merges = -1;
    if (idx < 0) return KILN_OK; /* tokenizing will say what is missing */
    if (kiln_gguf_kv_type(g, idx) != KILN_GGUF_ARRAY || kiln_gguf_arr_type(g, idx) != KILN_GGUF_STRING)
        return kiln__error(KILN_E_FORMAT, "vocab: 'tokenizer.ggml.merges' is not an ARRAY of STRING");
    uint64_t n = kiln_gguf_arr_len(g, idx);
    if (n > (uint64_t)INT32_MAX / 2)
        return kiln__error(KILN_E_FORMAT, "vocab: 'tokenizer.ggml.merges' has %llu entries (at most %d)",
                           (unsigned long long)n, INT32_MAX / 2);
    v->merges = kiln__alloc_array((size_t)n + 1, sizeof *v->merges);
    if (!v->merges) return kiln__nomem("merges");
    size_t total = 1;
    for (uint64_t j = 0; j < n; j++) {
        kiln_str *m = &v->merges[j];
        kiln_status st = kiln_gguf_arr_str(g, idx, j, m);
        if (st != KILN_OK)
            return kiln__error_prefix(st, "vocab: tokenizer.ggml.merges[%llu]: ", (unsigned long long)j);
        if (m->len < 3 || !memchr(m->data + 1, ' ', m->len - 2))
            return kiln__error(KILN_E_FORMAT,
                               "vocab: tokenizer.ggml.merges[%llu] = '%.*s' is not \"left right\"",
                               (unsigned long long)j, (int)KILN__MIN(m->len, 64), m->data);
        if (kiln__add_overflow_size(total, m->len, &total))
            return kiln__error(KILN_E_FORMAT, "vocab: merges overflow the address space");
    }
    v->merge_blob = kiln__alloc(total);
    if (!v->merge_blob) return kiln__nomem("merges");
    char *p = v->merge_blob;
    for (uint64_t j = 0; j < n; j++) {
        memcpy(p, v->merges[j].data, v->merges[j].len);
        v->merges[j].data = p;
        p += v->merges[j].len;
    }
    v->n_merges = (int32_t)n;
    return index_merges(v);
}

/* Decode text (spelled with the byte map) into out; returns the length (at most text_len). */
static size_t decode_spelling(const byte_map *m, const kiln_str *text, char *out) {
    size_t n = 0;
    for (size_t i = 0; i < text->len;) {
        uint32_t cp;
        size_t k = kiln__utf8_decode((const uint8_t *)text->data + i, text->len - i, &cp);
        if (cp < KILN__ARRAY_LEN(m->cp_to_byte) && m->cp_to_byte[cp] >= 0) {
            out[n++] = (char)m->cp_to_byte[cp];
        } else {
            memcpy(out + n, text->data + i, k);
            n += k;
        }
        i += k;
    }
    return n;
}

static kiln_status decode_pieces(kiln_vocab *v) {
    const byte_map *m = byte_map_get();
    size_t total = 1;
    for (int32_t id = 0; id < v->n_tokens; id++)
        total += v->texts[id].len; /* cannot overflow: the texts' blob has this size */
    v->pieces = kiln__alloc_array((size_t)v->n_tokens, sizeof *v->pieces);
    v->piece_blob = kiln__alloc(total);
    if (!v->pieces || !v->piece_blob) return kiln__nomem("token pieces");
    char *p = v->piece_blob;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        size_t n = decode_spelling(m, &v->texts[id], p);
        v->pieces[id] = (kiln_str){p, n};
        p += n;
    }
    return KILN_OK;
}

kiln_status kiln__bpe_prepare(const kiln_gguf *gguf, kiln_vocab *vocab) {
    kiln_status st = read_pre(gguf, vocab);
    if (st == KILN_OK) st = read_merges(gguf, vocab);
    if (st == KILN_OK) st = decode_pieces(vocab);
    return st;
}

int32_t kiln__bpe_merge_rank(const kiln_vocab *v, const char *left, size_t left_len, const char *right,
                             size_t right_len) {
    uint64_t h = kiln__fnv1a(KILN__FNV_BASIS, left, left_len);
    h = kiln__fnv1a(h, " ", 1);
    h = kiln__fnv1a(h, right, right_len);
    size_t len = left_len + 1 + right_len;
    for (size_t slot = (size_t)h & v->merge_mask;; slot = (slot + 1) & v->merge_mask) {
        int32_t r = v->merge_buckets[slot];
        if (r < 0) return -1;
        const kiln_str *m = &v->merges[r];
        if (m->len == len && memcmp(m->data, left, left_len) == 0 && m->data[left_len] == ' ' &&
            memcmp(m->data + left_len + 1, right, right_len) == 0 &&
            memchr(m->data + 1, ' ', left_len) == m->data + left_len)
            return r;
    }
}

/* ---- tokenizing ---- */

typedef struct symbol {
    int32_t prev, next; /* neighbours in the live list, -1 at the ends */
    uint32_t off, n;    /* bytes of the spelled word; n == 0 once merged into its left neighbour */
} symbol;

typedef struct bpe_run {
    const kiln_vocab *vocab;
    const byte_map *map;
    char *spelled; /* the current word, spelled with the byte map */
    symbol *syms;
    kiln__bigram_heap heap;
} bpe_run;

static void try_add_bigram(bpe_run *r, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const symbol *l = &r->syms[left], *rt = &r->syms[right];
    int32_t rank = kiln__bpe_merge_rank(r->vocab, r->spelled + l->off, l->n, r->spelled + rt->off, rt->n);
    if (rank < 0) return;
    kiln__bigram b = {left, right, -(float)rank, l->n + rt->n}; /* lower rank merges first */
    kiln__bigram_push(&r->heap, b);
}

static void merge_all(bpe_run *r) {
    while (r->heap.len > 0) {
        kiln__bigram b = kiln__bigram_pop(&r->heap);
        symbol *l = &r->syms[b.left], *rt = &r->syms[b.right];
        if (l->n == 0 || rt->n == 0 || l->n + rt->n != b.size) continue; /* stale */
        l->n = b.size;
        rt->n = 0;
        l->next = rt->next;
        if (rt->next >= 0) r->syms[rt->next].prev = b.left;
        try_add_bigram(r, l->prev, b.left);
        try_add_bigram(r, b.left, l->next);
    }
}

static void emit_symbol(const bpe_run *r, const symbol *s, kiln__token_sink *sink) {
    int32_t id = kiln__vocab_find(r->vocab, r->spelled + s->off, s->n);
    if (id >= 0) {
        kiln__sink_push(sink, id);
        return;
    }
    for (uint32_t k = 0; k < s->n; k++) {
        int32_t one = kiln__vocab_find(r->vocab, r->spelled + s->off + k, 1);
        if (one >= 0) kiln__sink_push(sink, one);
    }
}

/* Spell, merge and emit one word of len bytes. */
static void tokenize_word(bpe_run *r, const char *word, size_t len, kiln__token_sink *sink) {
    uint32_t n_spelled = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)word[i];
        r->syms[i] = (symbol){(int32_t)i - 1, (int32_t)i + 1, n_spelled, r->map->spell_len[b]};
        memcpy(r->spelled + n_spelled, r->map->spell[b], r->map->spell_len[b]);
        n_spelled += r->map->spell_len[b];
    }
    r->syms[len - 1].next = -1;
    if (r->vocab->ignore_merges) {
        int32_t id = kiln__vocab_find(r->vocab, r->spelled, n_spelled);
        if (id >= 0) {
            kiln__sink_push(sink, id);
            return;
        }
    }
    r->heap.len = 0;
    for (size_t k = 0; k + 1 < len; k++)
        try_add_bigram(r, (int32_t)k, (int32_t)k + 1);
    merge_all(r);
    for (int32_t k = 0; k >= 0; k = r->syms[k].next)
        emit_symbol(r, &r->syms[k], sink);
}

kiln_status kiln__bpe_tokenize(const kiln_vocab *vocab, const char *text, size_t len, bool at_start,
                               kiln__token_sink *sink) {
    (void)at_start;
    if (vocab->pretok == KILN__PRETOK_UNKNOWN)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "tokenize: pre-tokenizer '%s' (tokenizer.ggml.pre) is not known; "
                           "known: %s",
                           vocab->pre, kiln__pretok_known_names());
    if (vocab->n_merges < 0)
        return kiln__error(KILN_E_FORMAT, "tokenize: this 'gpt2' vocabulary has no tokenizer.ggml.merges");
    if (len > (size_t)INT32_MAX)
        return kiln__error(KILN_E_RANGE, "tokenize: text of %zu bytes is too long (at most %d)", len,
                           INT32_MAX);
    uint32_t *bounds = NULL;
    size_t n_words = 0, longest = 0;
    kiln_status st = kiln__pretok_split(vocab->pretok, text, len, &bounds, &n_words);
    if (st != KILN_OK) return st;
    for (size_t w = 0; w < n_words; w++)
        longest = KILN__MAX(longest, (size_t)(bounds[w + 1] - bounds[w]));
    bpe_run *r = kiln__calloc(1, sizeof *r);
    if (r) {
        r->vocab = vocab;
        r->map = byte_map_get();
        r->spelled = kiln__alloc_array(longest, 2);
        r->syms = kiln__alloc_array(longest, sizeof *r->syms);
        r->heap.items = kiln__alloc_array(longest, 3 * sizeof *r->heap.items); /* seeds + two per merge */
    }
    if (!r || !r->spelled || !r->syms || !r->heap.items) {
        st = kiln__nomem("tokenizer scratch");
    } else {
        for (size_t w = 0; w < n_words; w++)
            tokenize_word(r, text + bounds[w], bounds[w + 1] - bounds[w], sink);
    }
    if (r) {
        kiln__dealloc(r->spelled);
        kiln__dealloc(r->syms);
        kiln__dealloc(r->heap.items);
    }
    kiln__dealloc(r);
    kiln__dealloc(bounds);
    return st;
}

void kiln__bpe_piece(const kiln_vocab *vocab, int32_t id, kiln__piece *out) {
    const kiln_str *text = &vocab->texts[id];
    *out = (kiln__piece){"", 0, false};
    switch ((kiln_token_attr)vocab->attrs[id]) {
    case KILN_TOKEN_NORMAL: *out = (kiln__piece){vocab->pieces[id].data, vocab->pieces[id].len, false}; break;
    case KILN_TOKEN_USER_DEFINED:
    case KILN_TOKEN_UNKNOWN: *out = (kiln__piece){text->data, text->len, false}; break;
    case KILN_TOKEN_BYTE:
        *out = (kiln__piece){(const char *)&vocab->byte_values[vocab->token_byte[id]], 1, false};
        break;
    case KILN_TOKEN_CONTROL:
    case KILN_TOKEN_UNUSED: break;
    }
}
