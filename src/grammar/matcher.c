/*
 * matcher.c - kiln_grammar_matcher: one sequence's position in a grammar, advanced by the bytes of each
 * accepted token, and the mask of the tokens that may come next.
 *
 * The mask walks the vocabulary's token trie depth first, advancing the set of parse stacks by each
 * byte's character on the way down, so a prefix shared by many tokens is matched once and a subtree is
 * cut as soon as its prefix leaves the grammar. A character split across tokens is carried as partial
 * UTF-8: a token that ends inside a character is allowed when some stack accepts a code point that the
 * character can still become. The end tokens (EOS, end of turn) are allowed exactly when the text so far
 * is a complete sentence of the grammar. Masks are cached by state (the set of stacks and the partial
 * character): a grammar that loops (inside a JSON string, a list of items) meets the same state again
 * and pays for the walk once. Below that, every move a walk makes (set of stacks, code point) is
 * remembered (dfa.h), so the walk from a state next to one seen before (the next position of a bounded
 * string) costs a table look-up per trie node. Memory grows while the largest state grows, then is
 * reused (the memo within its bounds).
 */
#include "grammar/dfa.h"

#include <string.h>

#define CACHE_ENTRIES 16

typedef struct mask_entry {
    bool valid;
    uint64_t hash, used;
    uint32_t *stacks; /* a copy of the set's records */
    size_t len, cap;
    uint32_t count;
    kg_utf8 u;
    uint32_t *bits; /* (words) */
} mask_entry;

struct kiln_grammar_matcher {
    const kiln_grammar *g;
    const kiln_grammar_vocab *v; /* or NULL: text only, no masks */
    kg_work w;
    kg_set cur; /* the state, at the bottom of the arena */
    kg_utf8 u;  /* the partial character after the accepted bytes */
    bool ended; /* an end token was accepted */
    size_t words;
    uint32_t *bits;
    mask_entry cache[CACHE_ENTRIES];
    uint64_t clock;
    kg_dfa dfa;
    kiln_grammar_stats stats;
    uint64_t mask_work_limit; /* KG_MAX_MASK_WORK, or a test's */
};

static void reset_state(kiln_grammar_matcher *m) {
    m->w.len = 0;
    m->u = (kg_utf8){0};
    m->ended = false;
    kiln__kg_initial(&m->w, &m->cur);
}

kiln_status kiln_grammar_matcher_create(const kiln_grammar *g, const kiln_grammar_vocab *v,
                                        kiln_grammar_matcher **out) {
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_grammar_matcher_create: out is NULL");
    *out = NULL;
    if (!g) return kiln__error(KILN_E_INVALID_ARG, "kiln_grammar_matcher_create: grammar is NULL");
    kiln_grammar_matcher *m = kiln__calloc(1, sizeof *m);
    if (!m) return kiln__nomem("the grammar matcher");
    m->g = g, m->v = v;
    m->mask_work_limit = KG_MAX_MASK_WORK;
    kiln_status st = kiln__kg_work_init(&m->w, g);
    if (st == KILN_OK && v) {
        m->words = ((size_t)v->n_vocab + 31) / 32;
        if (!(m->bits = kiln__alloc_array(m->words, sizeof *m->bits))) st = kiln__nomem("the grammar mask");
    }
    if (st == KILN_OK) {
        reset_state(m);
        st = m->w.st;
    }
    if (st != KILN_OK) {
        kiln_grammar_matcher_destroy(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

void kiln_grammar_matcher_destroy(kiln_grammar_matcher *m) {
    if (!m) return;
    for (int i = 0; i < CACHE_ENTRIES; i++) {
        kiln__dealloc(m->cache[i].stacks);
        kiln__dealloc(m->cache[i].bits);
    }
    kiln__dealloc(m->bits);
    kiln__kg_dfa_free(&m->dfa);
    kiln__kg_work_free(&m->w);
    kiln__dealloc(m);
}

kiln_status kiln_grammar_matcher_reset(kiln_grammar_matcher *m) {
    if (!m) return kiln__error(KILN_E_INVALID_ARG, "kiln_grammar_matcher_reset: matcher is NULL");
    m->w.st = KILN_OK;
    reset_state(m);
    return m->w.st;
}

bool kiln_grammar_matcher_can_end(const kiln_grammar_matcher *m) {
    return m && !m->ended && m->cur.accepting && m->u.remaining == 0;
}

/* Only the end is left: the text is complete and no character can follow. */
bool kiln_grammar_matcher_is_done(const kiln_grammar_matcher *m) {
    return m && (m->ended || (kiln_grammar_matcher_can_end(m) && m->cur.count == 1));
}

/* Advance the state by bytes; on failure the state is unchanged and *bad says which byte failed. */
static kiln_status advance_bytes(kiln_grammar_matcher *m, const uint8_t *bytes, size_t n, size_t *bad) {
    kg_work *w = &m->w;
    kg_set s = m->cur;
    kg_utf8 u = m->u;
    const size_t base = m->cur.end;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp;
        int r = kiln__kg_utf8_step(&u, bytes[i], &cp);
        *bad = i;
        if (r < 0) {
            w->len = base;
            return kiln__error(KILN_E_INVALID_ARG, "grammar: byte %zu (0x%02X) is not valid UTF-8 here", i,
                               bytes[i]);
        }
        if (r == 0) continue;
        kg_set next;
        if (kiln__kg_advance(w, &s, cp, &next) != KILN_OK || next.count == 0) {
            w->len = base;
            if (w->st != KILN_OK) {
                kiln_status st = w->st;
                w->st = KILN_OK;
                return st;
            }
            return kiln__error(KILN_E_INVALID_ARG,
                               "grammar: character U+%04X at byte %zu is not allowed here", cp, i);
        }
        /* keep one working set just above the state */
        memmove(w->arena + base, w->arena + next.start, (next.end - next.start) * sizeof *w->arena);
        w->len = base + (next.end - next.start);
        s = next;
        s.start = base, s.end = w->len;
    }
    if (u.remaining > 0) {
        uint32_t lo, hi;
        kiln__kg_utf8_range(&u, &lo, &hi);
        if (!kiln__kg_can_match_range(w, &s, lo, hi)) {
            w->len = base;
            *bad = n - 1;
            return kiln__error(KILN_E_INVALID_ARG,
                               "grammar: the character begun at the end is not allowed here");
        }
    }
    memmove(w->arena, w->arena + s.start, (s.end - s.start) * sizeof *w->arena);
    w->len = s.end - s.start;
    m->cur = s;
    m->cur.start = 0, m->cur.end = w->len;
    m->u = u;
    return KILN_OK;
}

kiln_status kiln_grammar_matcher_accept_text(kiln_grammar_matcher *m, const char *text, size_t len) {
    if (!m || (!text && len))
        return kiln__error(KILN_E_INVALID_ARG, "kiln_grammar_matcher_accept_text: NULL argument");
    if (m->ended) return kiln__error(KILN_E_INVALID_ARG, "grammar: the text already ended");
    size_t bad = 0;
    kiln_status st = advance_bytes(m, (const uint8_t *)text, len, &bad);
    return st == KILN_OK ? st : kiln__error_prefix(st, "after %zu bytes of %zu: ", bad, len);
}

static bool is_end_token(const kiln_grammar_vocab *v, int32_t token) {
    for (int32_t i = 0; i < v->n_end; i++)
        if (v->end_tokens[i] == token) return true;
    return false;
}

kiln_status kiln_grammar_matcher_accept(kiln_grammar_matcher *m, int32_t token) {
    if (!m || !m->v)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_grammar_matcher_accept: no matcher or no vocabulary");
    const kiln_grammar_vocab *v = m->v;
    if (token < 0 || token >= v->n_vocab)
        return kiln__error(KILN_E_INVALID_ARG, "grammar: token %d is outside 0 .. %d", token, v->n_vocab - 1);
    if (m->ended) return kiln__error(KILN_E_INVALID_ARG, "grammar: token %d comes after the end", token);
    if (is_end_token(v, token)) {
        if (!kiln_grammar_matcher_can_end(m))
            return kiln__error(KILN_E_INVALID_ARG, "grammar: end token %d before the grammar is complete",
                               token);
        m->ended = true;
        return KILN_OK;
    }
    if (!v->in_trie[token])
        return kiln__error(KILN_E_INVALID_ARG, "grammar: token %d prints nothing or is a control token",
                           token);
    size_t bad = 0;
    kiln_status st = advance_bytes(m, v->token_bytes + v->token_off[token],
                                   v->token_off[token + 1] - v->token_off[token], &bad);
    return st == KILN_OK ? st : kiln__error_prefix(st, "token %d: ", token);
}

static void mark_tokens(kiln_grammar_matcher *m, uint32_t node) {
    const kiln_grammar_vocab *v = m->v;
    for (uint32_t k = v->tok_start[node]; k < v->tok_start[node + 1]; k++)
        m->bits[v->toks[k] >> 5] |= 1u << (v->toks[k] & 31);
}

/* Mark the tokens below trie node `node` whose bytes continue the set s (after partial character u). */
static void walk(kiln_grammar_matcher *m, uint32_t node, const kg_set *s, kg_utf8 u) {
    const kiln_grammar_vocab *v = m->v;
    for (uint32_t c = node + 1; c < v->end[node] && m->w.st == KILN_OK; c = v->end[c]) {
        kg_utf8 u2 = u;
        uint32_t cp;
        int r = kiln__kg_utf8_step(&u2, v->byte[c], &cp);
        if (r < 0) continue;
        kg_set next = *s;
        size_t mark = m->w.len;
        if (r == 1) {
            kiln__kg_advance(&m->w, s, cp, &next);
            m->stats.advances++;
            if (next.count == 0) {
                m->w.len = mark;
                continue;
            }
        } else {
            uint32_t lo, hi;
            kiln__kg_utf8_range(&u2, &lo, &hi);
            if (!kiln__kg_can_match_range(&m->w, s, lo, hi)) continue;
        }
        mark_tokens(m, c);
        if (c + 1 < v->end[c]) walk(m, c, &next, u2);
        m->w.len = mark;
    }
}

/* The move from interned set id by cp: 1 with *next an id, 0 when it leaves the grammar, 2 when the memo
 * is full and *plain holds the next set in the arena (the caller truncates the arena after). */
static int move(kiln_grammar_matcher *m, uint32_t id, uint32_t cp, uint32_t *next, kg_set *plain) {
    if (kiln__kg_dfa_lookup(&m->dfa, id, cp, next)) return *next != KG_DFA_DEAD;
    kg_work *w = &m->w;
    const kg_dfa_set *e = &m->dfa.sets[id];
    if (w->len + e->len > w->cap) {
        size_t cap = w->cap;
        while (cap < w->len + e->len)
            cap *= 2;
        uint32_t *a = kiln__realloc_array(w->arena, cap, sizeof *a);
        if (!a) {
            if (w->st == KILN_OK) w->st = kiln__nomem("the grammar matcher's parse stacks");
            return 0;
        }
        w->arena = a, w->cap = cap;
    }
    kg_set from = {.start = w->len, .end = w->len + e->len, .count = e->count};
    memcpy(w->arena + from.start, m->dfa.pool + e->off, e->len * sizeof *w->arena);
    w->len = from.end;
    kiln__kg_advance(w, &from, cp, plain);
    m->stats.advances++;
    if (w->st != KILN_OK) {
        w->len = from.start;
        return 0;
    }
    uint32_t n = plain->count == 0 ? KG_DFA_DEAD : kiln__kg_dfa_intern(&m->dfa, w, plain);
    if (n == KG_DFA_FULL) return 2; /* the caller walks on from the arena set */
    w->len = from.start;
    kiln__kg_dfa_remember(&m->dfa, id, cp, n);
    *next = n;
    return n != KG_DFA_DEAD;
}

/* walk() over interned sets. */
static void walk_memo(kiln_grammar_matcher *m, uint32_t node, uint32_t id, kg_utf8 u) {
    const kiln_grammar_vocab *v = m->v;
    for (uint32_t c = node + 1; c < v->end[node] && m->w.st == KILN_OK; c = v->end[c]) {
        kg_utf8 u2 = u;
        uint32_t cp, next = id;
        int r = kiln__kg_utf8_step(&u2, v->byte[c], &cp);
        if (r < 0) continue;
        if (r == 0) {
            uint32_t lo, hi;
            const kg_dfa_set *e = &m->dfa.sets[id];
            kiln__kg_utf8_range(&u2, &lo, &hi);
            if (!kiln__kg_records_match_range(m->g, m->dfa.pool + e->off, e->len, lo, hi)) continue;
        }
        size_t mark = m->w.len;
        kg_set plain;
        int k = r == 1 ? move(m, id, cp, &next, &plain) : 1;
        if (k == 0) {
            m->w.len = mark;
            continue;
        }
        mark_tokens(m, c);
        if (c + 1 < v->end[c]) {
            if (k == 1)
                walk_memo(m, c, next, u2);
            else
                walk(m, c, &plain, u2);
        }
        m->w.len = mark;
    }
}

static mask_entry *cache_find(kiln_grammar_matcher *m, uint64_t h) {
    for (int i = 0; i < CACHE_ENTRIES; i++) {
        mask_entry *e = &m->cache[i];
        if (e->valid && e->hash == h && e->u.value == m->u.value && e->u.remaining == m->u.remaining &&
            e->u.min == m->u.min && kiln__kg_equal(&m->w, &m->cur, e->stacks, e->len, e->count))
            return e;
    }
    return NULL;
}

/* Keep the mask just computed in the least recently used entry (nothing is cached when memory runs out). */
static void cache_store(kiln_grammar_matcher *m, uint64_t h) {
    mask_entry *e = &m->cache[0];
    for (int i = 1; i < CACHE_ENTRIES; i++)
        if (!m->cache[i].valid || (e->valid && m->cache[i].used < e->used)) e = &m->cache[i];
    size_t len = m->cur.end - m->cur.start;
    if (len > e->cap) {
        uint32_t *s = kiln__realloc_array(e->stacks, len, sizeof *s);
        if (!s) return;
        e->stacks = s, e->cap = len;
    }
    if (!e->bits && !(e->bits = kiln__alloc_array(m->words, sizeof *e->bits))) return;
    memcpy(e->stacks, m->w.arena + m->cur.start, len * sizeof *e->stacks);
    memcpy(e->bits, m->bits, m->words * sizeof *e->bits);
    e->len = len, e->count = m->cur.count, e->u = m->u, e->hash = h, e->used = ++m->clock, e->valid = true;
}

kiln_status kiln_grammar_matcher_mask(kiln_grammar_matcher *m, const uint32_t **bits) {
    if (!m || !bits || !m->v)
        return kiln__error(KILN_E_INVALID_ARG,
                           "kiln_grammar_matcher_mask: no matcher, no vocabulary or bits is NULL");
    *bits = m->bits;
    if (m->ended) {
        memset(m->bits, 0, m->words * sizeof *m->bits);
        return KILN_OK;
    }
    uint64_t h =
        kiln__kg_hash(&m->w, &m->cur) ^ ((uint64_t)m->u.value << 8 | m->u.remaining) * 0x9E3779B97F4A7C15ull;
    mask_entry *e = cache_find(m, h);
    if (e) {
        memcpy(m->bits, e->bits, m->words * sizeof *m->bits);
        e->used = ++m->clock;
        m->stats.cache_hits++;
        return KILN_OK;
    }
    m->stats.cache_misses++;
    memset(m->bits, 0, m->words * sizeof *m->bits);
    kiln__kg_dfa_trim(&m->dfa);
    uint32_t id = kiln__kg_dfa_intern(&m->dfa, &m->w, &m->cur);
    m->w.work = 0;
    m->w.work_limit = m->mask_work_limit;
    if (id == KG_DFA_FULL)
        walk(m, 0, &m->cur, m->u);
    else
        walk_memo(m, 0, id, m->u);
    m->w.work_limit = 0;
    m->w.len = m->cur.end;
    if (m->w.st != KILN_OK) {
        kiln_status st = m->w.st;
        m->w.st = KILN_OK;
        return st;
    }
    if (kiln_grammar_matcher_can_end(m))
        for (int32_t i = 0; i < m->v->n_end; i++)
            m->bits[m->v->end_tokens[i] >> 5] |= 1u << (m->v->end_tokens[i] & 31);
    cache_store(m, h);
    return KILN_OK;
}

void kiln_grammar_matcher_stats(const kiln_grammar_matcher *m, kiln_grammar_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (m) *out = m->stats;
}

void kiln__grammar_matcher_set_mask_work_limit(kiln_grammar_matcher *m, uint64_t limit) {
    m->mask_work_limit = limit;
}

int32_t kiln__grammar_matcher_n_vocab(const kiln_grammar_matcher *m) {
    return m && m->v ? m->v->n_vocab : 0;
}
