/*
 * token_trie.c - kiln_grammar_vocab: every token's bytes (what it adds to the detokenized text, with
 * SentencePiece's U+2581 as a space and byte tokens as their byte) in a trie (grammar.h), so that a mask
 * walk checks a prefix shared by many tokens once. Built once per vocabulary and shared, read-only, by
 * every matcher of that vocabulary.
 *
 * The trie is made from the tokens sorted by their bytes: each token adds nodes for the bytes beyond the
 * prefix it shares with the token before it, so nodes come out in depth-first order.
 */
#include "grammar/grammar.h"
#include "tokenizer/vocab.h"

#include <string.h>

#define SPACE_MARK "\xE2\x96\x81"

void kiln_grammar_vocab_destroy(kiln_grammar_vocab *v) {
    if (!v) return;
    kiln__dealloc(v->byte);
    kiln__dealloc(v->end);
    kiln__dealloc(v->tok_start);
    kiln__dealloc(v->toks);
    kiln__dealloc(v->end_tokens);
    kiln__dealloc(v->token_bytes);
    kiln__dealloc(v->token_off);
    kiln__dealloc(v->in_trie);
    kiln__dealloc(v);
}

/* Every token's bytes into v->token_bytes / token_off; which tokens may appear as text into in_trie. */
static kiln_status collect_bytes(kiln_grammar_vocab *v, const kiln_vocab *vocab) {
    const kiln__tokenizer_ops *ops = kiln__tokenizer_ops_get(vocab);
    if (!ops) return kiln__error_prefix(KILN_E_UNSUPPORTED, "grammar vocabulary: ");
    size_t total = 0;
    for (int32_t t = 0; t < v->n_vocab; t++) {
        kiln__piece pc;
        ops->piece(vocab, t, &pc);
        total += pc.len;
    }
    v->token_bytes = kiln__alloc(total + 1);
    v->token_off = kiln__alloc_array((size_t)v->n_vocab + 1, sizeof *v->token_off);
    v->in_trie = kiln__calloc((size_t)v->n_vocab, sizeof *v->in_trie);
    if (!v->token_bytes || !v->token_off || !v->in_trie) return kiln__nomem("the grammar vocabulary");
    if (total > UINT32_MAX)
        return kiln__error(KILN_E_UNSUPPORTED, "grammar vocabulary: tokens hold %zu bytes", total);
    size_t at = 0;
    for (int32_t t = 0; t < v->n_vocab; t++) {
        kiln__piece pc;
        ops->piece(vocab, t, &pc);
        v->token_off[t] = (uint32_t)at;
        for (size_t i = 0; i < pc.len;) {
            if (pc.unescape_spaces && pc.len - i >= 3 && memcmp(pc.data + i, SPACE_MARK, 3) == 0) {
                v->token_bytes[at++] = ' ';
                i += 3;
            } else {
                v->token_bytes[at++] = (uint8_t)pc.data[i++];
            }
        }
        int32_t attr = kiln_vocab_token_attr(vocab, t);
        size_t n = at - v->token_off[t];
        v->in_trie[t] = n > 0 && n <= KG_MAX_TOKEN_BYTES && attr != KILN_TOKEN_CONTROL &&
                        attr != KILN_TOKEN_UNKNOWN && attr != KILN_TOKEN_UNUSED;
    }
    v->token_off[v->n_vocab] = (uint32_t)at;
    return KILN_OK;
}

/* Token order by bytes, then id. */
static int cmp_tokens(const kiln_grammar_vocab *v, int32_t x, int32_t y) {
    uint32_t lx = v->token_off[x + 1] - v->token_off[x], ly = v->token_off[y + 1] - v->token_off[y];
    int c = memcmp(v->token_bytes + v->token_off[x], v->token_bytes + v->token_off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Merge sort of ids[0..n) with tmp[n] as scratch (qsort has no way to pass v to its comparator). */
static void sort_tokens(const kiln_grammar_vocab *v, int32_t *ids, int32_t *tmp, int32_t n) {
    for (int32_t width = 1; width < n; width *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * width) {
            int32_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = cmp_tokens(v, ids[i], ids[j]) <= 0 ? ids[i++] : ids[j++];
            while (i < mid)
                tmp[k++] = ids[i++];
            while (j < hi)
                tmp[k++] = ids[j++];
        }
        memcpy(ids, tmp, (size_t)n * sizeof *ids);
    }
}

/* Nodes from the sorted tokens; path[d] is the node at depth d + 1 of the previous token. */
static kiln_status build_trie(kiln_grammar_vocab *v, const int32_t *sorted, int32_t n) {
    size_t max_nodes = 1 + (size_t)(v->token_off[v->n_vocab]);
    v->byte = kiln__alloc(max_nodes);
    v->end = kiln__alloc_array(max_nodes, sizeof *v->end);
    v->tok_start = kiln__alloc_array(max_nodes + 1, sizeof *v->tok_start);
    v->toks = kiln__alloc_array((size_t)n + 1, sizeof *v->toks);
    uint32_t path[KG_MAX_TOKEN_BYTES + 1];
    if (!v->byte || !v->end || !v->tok_start || !v->toks) return kiln__nomem("the grammar token trie");
    uint32_t nodes = 1, depth = 0, n_toks = 0;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    v->byte[0] = 0;
    path[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t t = sorted[i];
        const uint8_t *s = v->token_bytes + v->token_off[t];
        uint32_t len = v->token_off[t + 1] - v->token_off[t], common = 0;
        while (common < len && common < prev_len && s[common] == prev[common])
            common++;
        for (; depth > common; depth--)
            v->end[path[depth]] = nodes; /* close the nodes below the shared prefix */
        for (; depth < len; depth++) {
            v->byte[nodes] = s[depth];
            v->tok_start[nodes] = n_toks;
            path[depth + 1] = nodes++;
        }
        v->toks[n_toks++] = t; /* tokens of a node are consecutive: equal bytes sort together */
        prev = s, prev_len = len;
    }
    for (; depth > 0; depth--)
        v->end[path[depth]] = nodes;
    v->end[0] = nodes;
    v->tok_start[0] = 0;
    v->n_nodes = nodes;
    /* tok_start[i] was set when node i was made; nodes that end no token get their successor's start. */
    v->tok_start[nodes] = n_toks;
    return KILN_OK;
}

kiln_status kiln_grammar_vocab_create(const kiln_vocab *vocab, const int32_t *end_tokens, int32_t n_end,
                                      kiln_grammar_vocab **out) {
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_grammar_vocab_create: out is NULL");
    *out = NULL;
    if (!vocab || n_end < 0 || (n_end > 0 && !end_tokens))
        return kiln__error(KILN_E_INVALID_ARG, "kiln_grammar_vocab_create: vocab or end_tokens is NULL");
    int32_t n_vocab = kiln_vocab_n_tokens(vocab);
    for (int32_t i = 0; i < n_end; i++)
        if (end_tokens[i] < 0 || end_tokens[i] >= n_vocab)
            return kiln__error(KILN_E_INVALID_ARG,
                               "kiln_grammar_vocab_create: end token %d is outside 0 .. %d", end_tokens[i],
                               n_vocab - 1);
    kiln_grammar_vocab *v = kiln__calloc(1, sizeof *v);
    if (!v) return kiln__nomem("the grammar vocabulary");
    v->n_vocab = n_vocab;
    int32_t eos = kiln_vocab_eos(vocab);
    v->end_tokens = kiln__alloc_array((size_t)n_end + 1, sizeof *v->end_tokens);
    int32_t *sorted = kiln__alloc_array((size_t)n_vocab, sizeof *sorted);
    int32_t *tmp = kiln__alloc_array((size_t)n_vocab, sizeof *tmp);
    kiln_status st =
        v->end_tokens && sorted && tmp ? collect_bytes(v, vocab) : kiln__nomem("the grammar vocabulary");
    if (st == KILN_OK) {
        if (end_tokens) memcpy(v->end_tokens, end_tokens, (size_t)n_end * sizeof *end_tokens);
        v->n_end = n_end;
        if (!end_tokens && eos >= 0) v->end_tokens[v->n_end++] = eos;
        int32_t n = 0;
        for (int32_t t = 0; t < n_vocab; t++)
            if (v->in_trie[t]) sorted[n++] = t;
        sort_tokens(v, sorted, tmp, n);
        st = build_trie(v, sorted, n);
    }
    kiln__dealloc(sorted);
    kiln__dealloc(tmp);
    if (st != KILN_OK) {
        kiln_grammar_vocab_destroy(v);
        return st;
    }
    *out = v;
    return KILN_OK;
}

int32_t kiln_grammar_vocab_n_tokens(const kiln_grammar_vocab *v) {
    return v ? v->n_vocab : 0;
}
