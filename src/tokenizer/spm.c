/*
 * spm.c - the SentencePiece-style tokenizer of "llama" vocabularies, with llama.cpp's semantics.
 *
 * 1. If the vocab says add_space_prefix and the text starts the input or follows a special token, prepend
 *    one space; then write every ' ' as U+2581 ("▁").
 * 2. Split into characters by the UTF-8 lead byte (0xC0-0xDF: 2 bytes, 0xE0-0xEF: 3, 0xF0-0xFF: 4, any
 *    other byte: 1), cut short at the end of the text. Continuation bytes are not checked.
 * 3. Seed a max-heap with every adjacent pair whose concatenation is a token, keyed by that token's score;
 *    equal scores pop the leftmost pair first. Pop until empty: skip an entry whose symbols were merged
 *    since it was pushed (either is gone, or their sizes no longer add up), else merge the pair and push
 *    the pairs it now forms with its neighbours.
 * 4. Emit each remaining symbol: its token if its text is one; otherwise split it back along the merge
 *    that made it, and at single characters emit each byte as its <0xXX> token (or the unknown token).
 * Each merge shrinks the symbol list by one, so the whole run is O(n log n) in the text length.
 *
 * Detokenizing: NORMAL tokens print their text with "▁" as ' '; BYTE tokens print their byte;
 * USER_DEFINED tokens print their text as is; CONTROL and UNUSED tokens print nothing; UNKNOWN tokens
 * print " ⁇ ", as SentencePiece's own decoder does.
 */
#include "tokenizer/bigram_heap.h"
#include "tokenizer/vocab.h"

#include <string.h>

#define SPACE_MARK "\xE2\x96\x81"        /* U+2581 */
#define UNKNOWN_SURFACE " \xE2\x81\x87 " /* " ⁇ " (U+2047) */

typedef struct symbol {
    int32_t prev, next; /* neighbours in the live list, -1 at the ends */
    uint32_t off, n;    /* bytes of the escaped text; n == 0 once merged into its left neighbour */
    int32_t node;       /* the merge-tree node spelling this symbol */
} symbol;

typedef struct node {
    uint32_t off, n;
    int32_t left, right; /* the nodes merged into this one, -1 for a single character */
} node;

typedef struct spm_run {
    const kiln_vocab *vocab;
    const char *text; /* escaped text */
    symbol *syms;
    node *nodes;
    int32_t n_nodes;
    kiln__bigram_heap heap;
    int32_t *stack;
} spm_run;

static void try_add_bigram(spm_run *r, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const symbol *l = &r->syms[left], *rt = &r->syms[right];
    uint32_t size = l->n + rt->n;
    int32_t id = kiln__vocab_find(r->vocab, r->text + l->off, size);
    if (id < 0) return;
    kiln__bigram b = {left, right, r->vocab->scores[id], size};
    kiln__bigram_push(&r->heap, b);
}

static void merge_all(spm_run *r) {
    while (r->heap.len > 0) {
        kiln__bigram b = kiln__bigram_pop(&r->heap);
        symbol *l = &r->syms[b.left], *rt = &r->syms[b.right];
        if (l->n == 0 || rt->n == 0 || l->n + rt->n != b.size) continue; /* stale */
        node *m = &r->nodes[r->n_nodes];
        m->off = l->off;
        m->n = b.size;
        m->left = l->node;
        m->right = rt->node;
        l->node = r->n_nodes++;
        l->n = b.size;
        rt->n = 0;
        l->next = rt->next;
        if (rt->next >= 0) r->syms[rt->next].prev = b.left;
        try_add_bigram(r, l->prev, b.left);
        try_add_bigram(r, b.left, l->next);
    }
}

/* Emit the tokens of one final symbol, splitting it along its merges when its text is not a token. */
static kiln_status emit_symbol(spm_run *r, int32_t root, kiln__token_sink *sink) {
    size_t depth = 0;
    r->stack[depth++] = root;
    while (depth > 0) {
        const node *nd = &r->nodes[r->stack[--depth]];
        int32_t id = kiln__vocab_find(r->vocab, r->text + nd->off, nd->n);
        if (id >= 0) {
            kiln__sink_push(sink, id);
        } else if (nd->left >= 0) {
            r->stack[depth++] = nd->right;
            r->stack[depth++] = nd->left;
        } else {
            for (uint32_t k = 0; k < nd->n; k++) {
                uint8_t byte = (uint8_t)r->text[nd->off + k];
                if (r->vocab->byte_to_id[byte] < 0)
                    return kiln__error(KILN_E_UNSUPPORTED,
                                       "tokenize: byte 0x%02X has no token in this vocabulary (no <0x%02X> "
                                       "token and no unknown token)",
                                       byte, byte);
                kiln__sink_push(sink, r->vocab->byte_to_id[byte]);
            }
        }
    }
    return KILN_OK;
}

/* Write the escaped text into out (room for 3 * len + 3 bytes); returns its length. */
static size_t escape_text(const char *text, size_t len, bool space_prefix, char *out) {
    size_t n = 0;
    if (space_prefix) {
        memcpy(out, SPACE_MARK, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(out + n, SPACE_MARK, 3);
            n += 3;
        } else {
            out[n++] = text[i];
        }
    }
    return n;
}

static uint32_t char_len(uint8_t lead) {
    static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[lead >> 4];
}

/* Split the escaped text into one symbol (and one leaf node) per character; returns the count. */
static int32_t split_chars(spm_run *r, uint32_t n_bytes) {
    int32_t n = 0;
    for (uint32_t off = 0; off < n_bytes; n++) {
        uint32_t len = KILN__MIN(char_len((uint8_t)r->text[off]), n_bytes - off);
        r->syms[n] = (symbol){n - 1, n + 1, off, len, n};
        r->nodes[n] = (node){off, len, -1, -1};
        off += len;
    }
    if (n > 0) r->syms[n - 1].next = -1;
    r->n_nodes = n;
    return n;
}

static int32_t count_chars(const char *text, uint32_t n_bytes) {
    int32_t n = 0;
    for (uint32_t off = 0; off < n_bytes; n++)
        off += char_len((uint8_t)text[off]);
    return n;
}

kiln_status kiln__spm_tokenize(const kiln_vocab *vocab, const char *text, size_t len, bool at_start,
                               kiln__token_sink *sink) {
    if (len > (size_t)INT32_MAX / 3 - 3)
        return kiln__error(KILN_E_RANGE, "tokenize: text of %zu bytes is too long (at most %d)", len,
                           INT32_MAX / 3 - 3);
    spm_run r = {.vocab = vocab};
    kiln_status st = KILN_OK;
    char *escaped = kiln__alloc(3 * len + 3); /* every byte a space, plus the prefix */
    if (!escaped) return kiln__nomem("tokenizer scratch");
    uint32_t n_bytes = (uint32_t)escape_text(text, len, vocab->add_space_prefix && at_start, escaped);
    size_t n_chars = (size_t)count_chars(escaped, n_bytes);
    r.text = escaped;
    r.syms = kiln__alloc_array(n_chars, sizeof *r.syms);
    r.nodes = kiln__alloc_array(2 * n_chars, sizeof *r.nodes); /* leaves + at most n_chars - 1 merges */
    r.heap.items = kiln__alloc_array(3 * n_chars, sizeof *r.heap.items); /* seeds + two per merge */
    r.stack = kiln__alloc_array(2 * n_chars, sizeof *r.stack);
    if (!r.syms || !r.nodes || !r.heap.items || !r.stack) {
        st = kiln__nomem("tokenizer scratch");
        goto free_scratch;
    }
    int32_t n_syms = split_chars(&r, n_bytes);
    for (int32_t k = 0; k + 1 < n_syms; k++)
        try_add_bigram(&r, k, k + 1);
    merge_all(&r);
    for (int32_t k = 0; k >= 0 && k < n_syms && st == KILN_OK; k = r.syms[k].next) {
        st = emit_symbol(&r, r.syms[k].node, sink);
    }
free_scratch:
    kiln__dealloc(r.stack);
    kiln__dealloc(r.heap.items);
    kiln__dealloc(r.nodes);
    kiln__dealloc(r.syms);
    kiln__dealloc(escaped);
    return st;
}

void kiln__spm_piece(const kiln_vocab *vocab, int32_t id, kiln__piece *out) {
    const kiln_str *text = &vocab->texts[id];
    *out = (kiln__piece){"", 0, false};
    switch ((kiln_token_attr)vocab->attrs[id]) {
    case KILN_TOKEN_NORMAL: *out = (kiln__piece){text->data, text->len, true}; break;
    case KILN_TOKEN_USER_DEFINED: *out = (kiln__piece){text->data, text->len, false}; break;
    case KILN_TOKEN_BYTE:
        *out = (kiln__piece){(const char *)&vocab->byte_values[vocab->token_byte[id]], 1, false};
        break;
    case KILN_TOKEN_UNKNOWN: *out = (kiln__piece){UNKNOWN_SURFACE, sizeof UNKNOWN_SURFACE - 1, false}; break;
    case KILN_TOKEN_CONTROL:
    case KILN_TOKEN_UNUSED: break;
    }
}
