/*
 * stacks.c - the pushdown recognizer's sets of parse stacks (grammar.h), advanced one code point at a
 * time, and incremental UTF-8 decoding of token bytes.
 *
 * Expanding a stack whose top is not a character matcher: a rule's end pops the stack (continuing where
 * the rule above left off; popping the last position leaves the empty, accepting stack), and a rule
 * reference is replaced by each of the rule's alternatives on top of the position after the reference
 * (that position is left off when the reference ends its alternative, so repetitions do not grow the
 * stack). The parser refused left recursion, so expansion terminates; its recursion depth is bounded by
 * the number of rules. Stacks are kept distinct by a hash table, so ambiguous grammars stay bounded.
 */
#include "grammar/grammar.h"

#include <string.h>

bool kiln__grammar_match_char(const kg_elem *e, uint32_t pos, uint32_t cp, uint32_t *next) {
    if (e[pos].type == KG_ANY) {
        *next = pos + 1;
        return true;
    }
    bool negate = e[pos].type == KG_CHAR_NOT, found = false;
    uint32_t p = pos;
    do {
        if (e[p + 1].type == KG_RNG_UPPER) {
            found |= e[p].value <= cp && cp <= e[p + 1].value;
            p += 2;
        } else {
            found |= e[p].value == cp;
            p += 1;
        }
    } while (e[p].type == KG_CHAR_ALT);
    *next = p;
    return found != negate;
}

bool kiln__grammar_match_range(const kg_elem *e, uint32_t pos, uint32_t lo, uint32_t hi) {
    if (e[pos].type == KG_ANY) return true;
    bool negate = e[pos].type == KG_CHAR_NOT;
    uint32_t p = pos;
    do {
        uint32_t a = e[p].value, b = a;
        if (e[p + 1].type == KG_RNG_UPPER) b = e[++p].value;
        p++;
        if (!negate && a <= hi && b >= lo) return true;
        if (negate && a <= lo && b >= hi) return false;
    } while (e[p].type == KG_CHAR_ALT);
    return negate;
}

int kiln__kg_utf8_step(kg_utf8 *u, uint8_t b, uint32_t *cp) {
    if (u->remaining == 0) {
        if (b < 0x80) {
            *cp = b;
            return 1;
        }
        if (b >= 0xC2 && b <= 0xDF)
            *u = (kg_utf8){b & 0x1Fu, 0x80, 1};
        else if ((b & 0xF0) == 0xE0)
            *u = (kg_utf8){b & 0x0Fu, 0x800, 2};
        else if (b >= 0xF0 && b <= 0xF4)
            *u = (kg_utf8){b & 0x07u, 0x10000, 3};
        else
            return -1;
        return 0;
    }
    if ((b & 0xC0) != 0x80) return -1;
    u->value = u->value << 6 | (b & 0x3Fu);
    if (--u->remaining > 0) {
        uint32_t lo, hi; /* refuse a prefix no valid character has (overlong, beyond U+10FFFF) */
        kiln__kg_utf8_range(u, &lo, &hi);
        return hi < u->min || lo > 0x10FFFF ? -1 : 0;
    }
    if (u->value < u->min || u->value > 0x10FFFF || (u->value >= 0xD800 && u->value <= 0xDFFF)) return -1;
    *cp = u->value;
    return 1;
}

void kiln__kg_utf8_range(const kg_utf8 *u, uint32_t *lo, uint32_t *hi) {
    uint32_t shift = 6 * u->remaining;
    *lo = u->value << shift;
    *hi = *lo | ((1u << shift) - 1);
    if (*lo < u->min) *lo = u->min;
}

kiln_status kiln__kg_work_init(kg_work *w, const kiln_grammar *g) {
    memset(w, 0, sizeof *w);
    w->g = g;
    w->cap = 1024;
    w->n_slots = 64;
    w->arena = kiln__alloc_array(w->cap, sizeof *w->arena);
    w->path = kiln__alloc_array(KG_MAX_DEPTH, sizeof *w->path);
    w->slot_off = kiln__alloc_array(w->n_slots, sizeof *w->slot_off);
    w->slot_gen = kiln__calloc(w->n_slots, sizeof *w->slot_gen);
    if (!w->arena || !w->path || !w->slot_off || !w->slot_gen) {
        kiln__kg_work_free(w);
        return kiln__nomem("the grammar matcher");
    }
    return KILN_OK;
}

void kiln__kg_work_free(kg_work *w) {
    kiln__dealloc(w->arena);
    kiln__dealloc(w->path);
    kiln__dealloc(w->slot_off);
    kiln__dealloc(w->slot_gen);
    memset(w, 0, sizeof *w);
}

static uint64_t hash_stack(const uint32_t *s, uint32_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
    }
    return h;
}

static bool grow_arena(kg_work *w, size_t need) {
    if (need <= w->cap) return true;
    size_t cap = w->cap;
    while (cap < need)
        cap *= 2;
    uint32_t *a = kiln__realloc_array(w->arena, cap, sizeof *a);
    if (!a) {
        if (w->st == KILN_OK) w->st = kiln__nomem("the grammar matcher's parse stacks");
        return false;
    }
    w->arena = a, w->cap = cap;
    return true;
}

static void begin_set(kg_work *w) {
    w->building = w->len;
    w->building_count = 0;
    w->steps = 0;
    if (++w->gen == 0) {
        memset(w->slot_gen, 0, w->n_slots * sizeof *w->slot_gen);
        w->gen = 1;
    }
}

/* Re-insert the set being built into a table twice as large. */
static bool grow_slots(kg_work *w) {
    uint32_t n = w->n_slots * 2;
    uint32_t *off = kiln__alloc_array(n, sizeof *off), *gen = kiln__calloc(n, sizeof *gen);
    if (!off || !gen) {
        kiln__dealloc(off);
        kiln__dealloc(gen);
        if (w->st == KILN_OK) w->st = kiln__nomem("the grammar matcher's stack table");
        return false;
    }
    kiln__dealloc(w->slot_off);
    kiln__dealloc(w->slot_gen);
    w->slot_off = off, w->slot_gen = gen, w->n_slots = n, w->gen = 1;
    for (size_t p = w->building; p < w->len; p += 1 + w->arena[p]) {
        uint32_t i = (uint32_t)hash_stack(w->arena + p + 1, w->arena[p]) & (n - 1);
        while (gen[i] == w->gen)
            i = (i + 1) & (n - 1);
        gen[i] = w->gen, off[i] = (uint32_t)p;
    }
    return true;
}

/* Add path[0..n) to the set being built unless it is already there. */
static void add_stack(kg_work *w, uint32_t n) {
    if (w->st != KILN_OK) return;
    if (2 * (w->building_count + 1) > w->n_slots && !grow_slots(w)) return;
    uint32_t mask = w->n_slots - 1, i = (uint32_t)hash_stack(w->path, n) & mask;
    for (; w->slot_gen[i] == w->gen; i = (i + 1) & mask) {
        const uint32_t *s = w->arena + w->slot_off[i];
        if (s[0] == n && memcmp(s + 1, w->path, n * sizeof *s) == 0) return;
    }
    if (w->building_count >= KG_MAX_STACKS) {
        w->st = kiln__error(KILN_E_UNSUPPORTED,
                            "grammar: more than %u parse stacks at once (the grammar is too ambiguous)",
                            KG_MAX_STACKS);
        return;
    }
    if (w->len - w->building > UINT32_MAX - 2 * KG_MAX_DEPTH || !grow_arena(w, w->len + 1 + n)) {
        if (w->st == KILN_OK)
            w->st = kiln__error(KILN_E_UNSUPPORTED, "grammar: the parse stacks outgrew 4 GiB");
        return;
    }
    w->slot_gen[i] = w->gen, w->slot_off[i] = (uint32_t)w->len;
    w->arena[w->len] = n;
    memcpy(w->arena + w->len + 1, w->path, n * sizeof *w->path);
    w->len += 1 + n;
    w->building_count++;
}

static bool push_path(kg_work *w, uint32_t at, uint32_t pos, uint32_t *saved) {
    if (at >= KG_MAX_DEPTH) {
        if (w->st == KILN_OK)
            w->st =
                kiln__error(KILN_E_UNSUPPORTED, "grammar: a parse stack deeper than %u rules", KG_MAX_DEPTH);
        return false;
    }
    *saved = w->path[at];
    w->path[at] = pos;
    return true;
}

/* Expand the stack path[0..n) + [pos] into the set being built (path[0..n) is left as it was). */
static void expand(kg_work *w, uint32_t n, uint32_t pos) {
    const kg_elem *e = w->g->elems;
    if (w->st != KILN_OK) return;
    if (++w->steps > KG_MAX_STEPS) {
        w->st = kiln__error(KILN_E_UNSUPPORTED,
                            "grammar: more than %u expansion steps for one character (the grammar is too "
                            "ambiguous: nested optional or repeated groups)",
                            KG_MAX_STEPS);
        return;
    }
    while (kg_is_rule_end(e[pos].type)) {
        if (n == 0) {
            add_stack(w, 0);
            return;
        }
        pos = w->path[--n];
    }
    uint32_t saved;
    if (e[pos].type != KG_REF) {
        if (!push_path(w, n, pos, &saved)) return;
        add_stack(w, n + 1);
        w->path[n] = saved;
        return;
    }
    uint32_t after = pos + 1, m = n;
    bool pushed = !kg_is_rule_end(e[after].type);
    if (pushed && !push_path(w, n, after, &saved)) return;
    if (pushed) m = n + 1;
    const kiln_grammar *g = w->g;
    for (uint32_t a = g->rule_start[e[pos].value]; w->st == KILN_OK; a++) {
        expand(w, m, a);
        while (!kg_is_rule_end(e[a].type))
            a++;
        if (e[a].type == KG_END) break;
    }
    if (pushed) w->path[n] = saved;
}

static void end_set(kg_work *w, kg_set *out) {
    out->start = w->building;
    out->end = w->len;
    out->count = w->building_count;
    out->accepting = false;
    for (size_t p = out->start; p < out->end; p += 1 + w->arena[p])
        if (w->arena[p] == 0) out->accepting = true;
}

kiln_status kiln__kg_initial(kg_work *w, kg_set *out) {
    begin_set(w);
    const kiln_grammar *g = w->g;
    /* As a reference to root that ends its alternative: the empty stack under each of root's alternatives. */
    for (uint32_t a = g->rule_start[g->root]; w->st == KILN_OK; a++) {
        expand(w, 0, a);
        while (!kg_is_rule_end(g->elems[a].type))
            a++;
        if (g->elems[a].type == KG_END) break;
    }
    end_set(w, out);
    return w->st;
}

kiln_status kiln__kg_advance(kg_work *w, const kg_set *in, uint32_t cp, kg_set *out) {
    begin_set(w);
    for (size_t p = in->start; p < in->end && w->st == KILN_OK; p += 1 + w->arena[p]) {
        uint32_t n = w->arena[p], next;
        if (n == 0) continue;
        uint32_t top = w->arena[p + n];
        if (!kiln__grammar_match_char(w->g->elems, top, cp, &next)) continue;
        memcpy(w->path, w->arena + p + 1, (n - 1) * sizeof *w->path); /* arena may move below */
        expand(w, n - 1, next);
    }
    end_set(w, out);
    return w->st;
}

bool kiln__kg_records_match_range(const kiln_grammar *g, const uint32_t *recs, size_t len, uint32_t lo,
                                  uint32_t hi) {
    for (size_t p = 0; p < len; p += 1 + recs[p]) {
        uint32_t n = recs[p];
        if (n > 0 && kiln__grammar_match_range(g->elems, recs[p + n], lo, hi)) return true;
    }
    return false;
}

bool kiln__kg_can_match_range(const kg_work *w, const kg_set *s, uint32_t lo, uint32_t hi) {
    return kiln__kg_records_match_range(w->g, w->arena + s->start, s->end - s->start, lo, hi);
}

uint64_t kiln__kg_hash(const kg_work *w, const kg_set *s) {
    uint64_t h = s->count;
    for (size_t p = s->start; p < s->end; p += 1 + w->arena[p])
        h += hash_stack(w->arena + p + 1, w->arena[p]);
    return h;
}

/* Stacks in a set are distinct, so equal counts and a inside b make the sets equal. */
bool kiln__kg_equal(const kg_work *w, const kg_set *a, const uint32_t *b, size_t b_len, uint32_t b_count) {
    if (a->count != b_count || a->end - a->start != b_len) return false;
    for (size_t p = a->start; p < a->end; p += 1 + w->arena[p]) {
        const uint32_t *s = w->arena + p;
        bool found = false;
        for (size_t q = 0; q < b_len && !found; q += 1 + b[q])
            found = b[q] == s[0] && memcmp(b + q + 1, s + 1, s[0] * sizeof *s) == 0;
        if (!found) return false;
    }
    return true;
}
