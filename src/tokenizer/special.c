/*
 * special.c - special tokens: the list a vocabulary keeps, and cutting them out of text before the
 * tokenizer model sees it (llama.cpp's tokenizer_st_partition).
 *
 * The list holds every CONTROL, USER_DEFINED and UNKNOWN token with a non-empty text, longest first (equal
 * lengths by id). Partitioning starts from one raw fragment, the whole text; for each special token in
 * that order, every raw fragment is searched left to right and each occurrence becomes a token fragment
 * between the raw text before and after it. So a longer special wins over a shorter one inside it.
 * USER_DEFINED tokens are always split out (as Hugging Face's added tokens are); CONTROL and UNKNOWN ones
 * only when parse_special is set, so that plain text such as "<|im_end|>" typed by a user stays text.
 */
#include "tokenizer/vocab.h"

#include <stdlib.h>
#include <string.h>

typedef struct by_len {
    size_t len;
    int32_t id;
} by_len;

static int longest_first(const void *a, const void *b) {
    const by_len *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static bool is_special(const kiln_vocab *v, int32_t id) {
    uint8_t a = v->attrs[id];
    return v->texts[id].len > 0 &&
           (a == KILN_TOKEN_CONTROL || a == KILN_TOKEN_USER_DEFINED || a == KILN_TOKEN_UNKNOWN);
}

kiln_status kiln__specials_build(kiln_vocab *v) {
    int32_t n = 0;
    for (int32_t id = 0; id < v->n_tokens; id++)
        n += is_special(v, id);
    v->n_specials = n;
    v->specials = kiln__alloc_array((size_t)n + 1, sizeof *v->specials);
    by_len *sorted = kiln__alloc_array((size_t)n + 1, sizeof *sorted);
    if (!v->specials || !sorted) {
        kiln__dealloc(sorted);
        return kiln__nomem("the special-token list");
    }
    n = 0;
    for (int32_t id = 0; id < v->n_tokens; id++)
        if (is_special(v, id)) sorted[n++] = (by_len){v->texts[id].len, id};
    qsort(sorted, (size_t)n, sizeof *sorted, longest_first);
    for (int32_t k = 0; k < n; k++)
        v->specials[k] = sorted[k].id;
    kiln__dealloc(sorted);
    return KILN_OK;
}

typedef struct frag_list {
    kiln__fragment *items;
    size_t n, cap;
} frag_list;

static bool frag_insert(frag_list *l, size_t at, kiln__fragment f) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        kiln__fragment *p = kiln__realloc_array(l->items, cap, sizeof *p);
        if (!p) return false;
        l->items = p;
        l->cap = cap;
    }
    memmove(l->items + at + 1, l->items + at, (l->n - at) * sizeof *l->items);
    l->items[at] = f;
    l->n++;
    return true;
}

/* Cut every occurrence of token id out of the raw fragments. */
static kiln_status split_at(frag_list *l, const char *text, int32_t id, const kiln_str *tok) {
    for (size_t i = 0; i < l->n; i++) {
        kiln__fragment *f = &l->items[i];
        if (f->token >= 0 || f->len < tok->len) continue;
        const char *hit = memmem(text + f->off, f->len, tok->data, tok->len);
        if (!hit) continue;
        size_t at = (size_t)(hit - text), end = f->off + f->len;
        kiln__fragment before = {-1, f->off, at - f->off}, token = {id, at, tok->len};
        kiln__fragment after = {-1, at + tok->len, end - at - tok->len};
        l->items[i] = token;
        if (before.len > 0 && !frag_insert(l, i++, before)) return kiln__nomem("text fragments");
        if (after.len > 0 && !frag_insert(l, i + 1, after)) return kiln__nomem("text fragments");
        /* The loop moves on to `after` (the next item), which may hold more occurrences. */
    }
    return KILN_OK;
}

kiln_status kiln__special_partition(const kiln_vocab *vocab, const char *text, size_t len, bool parse_special,
                                    kiln__fragment **out, size_t *n_out) {
    frag_list l = {0};
    *out = NULL;
    *n_out = 0;
    if (len > 0 && !frag_insert(&l, 0, (kiln__fragment){-1, 0, len})) return kiln__nomem("text fragments");
    for (int32_t k = 0; k < vocab->n_specials && l.n > 0; k++) {
        int32_t id = vocab->specials[k];
        if (!parse_special && vocab->attrs[id] != KILN_TOKEN_USER_DEFINED) continue;
        kiln_status st = split_at(&l, text, id, &vocab->texts[id]);
        if (st != KILN_OK) {
            kiln__dealloc(l.items);
            return st;
        }
    }
    *out = l.items;
    *n_out = l.n;
    return KILN_OK;
}
