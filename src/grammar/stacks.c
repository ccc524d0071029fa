/*
 * stacks.c - the pushdown recognizer's sets of parse stacks (grammar.h), advanced one code point at a
 * time, and incremental UTF-8 decoding of token bytes.
 *
 * Expanding a stack whose top is not a character matcher: a rule's end pops the stack (continuing where
 * the rule above left off; popping the last position leaves the empty, accepting stack), and a rule
 * reference is replaced by each of the rule's alternatives on top of the position after the reference
 * (that position is left off when the reference ends its alternative, so repetitions do not grow the
 * stack). The parser refused left recursion, so expansion terminates; its recursion depth is bounded by
 * the number of rules. What a reference expands to depends only on the stack below it, so each (stack
 * below, reference) pair is expanded once per set (the memo of grammar.h's kg_work): nullable references
 * in a row, or nested nullable groups, reach the same pairs along exponentially many paths (a corpus
 * input of fuzz_grammar took 30 million expansion steps for 265 characters without the memo, 0.67
 * million with it). Stacks are kept distinct by a hash table, so ambiguous grammars stay bounded, and a
 * finished set is sorted into a canonical order, so that equal sets have equal records.
 */
#include "grammar/grammar.h"

#include <stdlib.h>
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
    w->pid = kiln__calloc(KG_MAX_DEPTH + 1, sizeof *w->pid);
    if (!w->arena || !w->path || !w->slot_off || !w->slot_gen || !w->pid) {
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
    kiln__dealloc(w->order);
    kiln__dealloc(w->pid);
    kiln__dealloc(w->memo_key);
    kiln__dealloc(w->memo_id);
    kiln__dealloc(w->memo_gen);
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
    w->memo_count = 0; /* the memo is per set: its generation, not the table, is reset */
    if (++w->memo_cur == 0) {
        if (w->memo_gen) memset(w->memo_gen, 0, w->memo_slots * sizeof *w->memo_gen);
        w->memo_cur = 1;
    }
    w->pid[0] = 0; /* the empty prefix */
    w->pid_valid = 0;
}

#define KG_NO_ID UINT32_MAX    /* a prefix the full memo could not name */
#define KG_EXPANDED (1u << 31) /* marks an expansion's key apart from a prefix's (positions are < 2^20) */

static uint32_t memo_slot(uint64_t key, uint32_t slots) {
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (slots - 1);
}

static bool grow_memo(kg_work *w) {
    uint32_t n = w->memo_slots ? 2 * w->memo_slots : 256;
    uint64_t *key = kiln__alloc_array(n, sizeof *key);
    uint32_t *id = kiln__alloc_array(n, sizeof *id), *gen = kiln__calloc(n, sizeof *gen);
    if (!key || !id || !gen) {
        kiln__dealloc(key);
        kiln__dealloc(id);
        kiln__dealloc(gen);
        if (w->st == KILN_OK) w->st = kiln__nomem("the grammar matcher's expansion memo");
        return false;
    }
    for (uint32_t j = 0; j < w->memo_slots; j++) {
        if (w->memo_gen[j] != w->memo_cur) continue;
        uint32_t i = memo_slot(w->memo_key[j], n);
        while (gen[i] == w->memo_cur)
            i = (i + 1) & (n - 1);
        gen[i] = w->memo_cur, key[i] = w->memo_key[j], id[i] = w->memo_id[j];
    }
    kiln__dealloc(w->memo_key);
    kiln__dealloc(w->memo_id);
    kiln__dealloc(w->memo_gen);
    w->memo_key = key, w->memo_id = id, w->memo_gen = gen, w->memo_slots = n;
    return true;
}

/* The id of (parent, value) in this set's memo; *fresh says whether it is new. KG_NO_ID when the parent
 * has none, the memo holds KG_MEMO_MAX entries (expansion goes on without it) or memory ran out (w->st);
 * then *fresh is true: nothing is skipped. */
static uint32_t memo_intern(kg_work *w, uint32_t parent, uint32_t value, bool *fresh) {
    *fresh = true;
    if (parent == KG_NO_ID) return KG_NO_ID;
    if (2 * (w->memo_count + 1) > w->memo_slots && (w->memo_count >= KG_MEMO_MAX || !grow_memo(w)))
        return KG_NO_ID;
    uint64_t key = (uint64_t)parent << 32 | value;
    uint32_t i = memo_slot(key, w->memo_slots);
    for (; w->memo_gen[i] == w->memo_cur; i = (i + 1) & (w->memo_slots - 1))
        if (w->memo_key[i] == key) {
            *fresh = false;
            return w->memo_id[i];
        }
    w->memo_gen[i] = w->memo_cur, w->memo_key[i] = key, w->memo_id[i] = ++w->memo_count;
    return w->memo_count;
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

/* Write path[at]; the prefix ids from at + 1 up are then stale. */
static void set_path(kg_work *w, uint32_t at, uint32_t pos) {
    w->path[at] = pos;
    if (w->pid_valid > at) w->pid_valid = at;
}

/* The id of the prefix path[0..n), interned on first need. */
static uint32_t prefix_id(kg_work *w, uint32_t n) {
    bool fresh;
    for (; w->pid_valid < n; w->pid_valid++)
        w->pid[w->pid_valid + 1] = memo_intern(w, w->pid[w->pid_valid], w->path[w->pid_valid], &fresh);
    return w->pid[n];
}

static bool push_path(kg_work *w, uint32_t at, uint32_t pos, uint32_t *saved) {
    if (at >= KG_MAX_DEPTH) {
        if (w->st == KILN_OK)
            w->st =
                kiln__error(KILN_E_UNSUPPORTED, "grammar: a parse stack deeper than %u rules", KG_MAX_DEPTH);
        return false;
    }
    *saved = w->path[at];
    set_path(w, at, pos);
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
    uint32_t saved = 0;
    if (e[pos].type != KG_REF) {
        if (!push_path(w, n, pos, &saved)) return;
        add_stack(w, n + 1);
        set_path(w, n, saved);
        return;
    }
    bool fresh;
    memo_intern(w, prefix_id(w, n), pos | KG_EXPANDED, &fresh);
    if (!fresh) return; /* this reference on this stack is already in the set */
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
    if (pushed) set_path(w, n, saved);
}

typedef struct kg_order {
    uint64_t hash;
    const uint32_t *rec;
} kg_order;

/* A total order on distinct stacks: by hash, then length, then positions. */
static int order_cmp(const void *pa, const void *pb) {
    const kg_order *a = pa, *b = pb;
    if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
    if (a->rec[0] != b->rec[0]) return a->rec[0] < b->rec[0] ? -1 : 1;
    for (uint32_t i = 1; i <= a->rec[0]; i++)
        if (a->rec[i] != b->rec[i]) return a->rec[i] < b->rec[i] ? -1 : 1;
    return 0;
}

/* Put the set being built in canonical order, so that equal sets have equal records (kiln__kg_equal is
 * then one comparison, where comparing unordered sets cost count^2: 16 M stack comparisons per memo probe
 * at KG_MAX_STACKS, which ambiguous grammars reach). */
static void sort_set(kg_work *w) {
    uint32_t n = w->building_count;
    size_t len = w->len - w->building;
    if (n < 2 || w->st != KILN_OK) return;
    if (n > w->order_cap) {
        kg_order *o = kiln__realloc_array(w->order, n, sizeof *o);
        if (!o) {
            w->st = kiln__nomem("the grammar matcher's parse stacks");
            return;
        }
        w->order = o, w->order_cap = n;
    }
    if (!grow_arena(w, w->len + len)) return; /* scratch for the sorted copy, just past the set */
    kg_order *o = w->order;
    uint32_t k = 0;
    for (size_t p = w->building; p < w->len; p += 1 + w->arena[p])
        o[k++] = (kg_order){hash_stack(w->arena + p + 1, w->arena[p]), w->arena + p};
    qsort(o, n, sizeof *o, order_cmp);
    uint32_t *dst = w->arena + w->len;
    for (uint32_t i = 0; i < n; i++) {
        memcpy(dst, o[i].rec, (1 + o[i].rec[0]) * sizeof *dst);
        dst += 1 + o[i].rec[0];
    }
    memcpy(w->arena + w->building, w->arena + w->len, len * sizeof *w->arena);
}

static void end_set(kg_work *w, kg_set *out) {
    sort_set(w);
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
        w->pid_valid = 0;
        expand(w, n - 1, next);
    }
    end_set(w, out);
    /* What this advance cost, in words: the stacks read, the set written (and sorted, hashed, interned by the
     * caller), and the expansion steps. A mask bounds the sum over its walk (work_limit). */
    w->work += (in->end - in->start) + (out->end - out->start) + w->steps;
    if (w->work_limit && w->work > w->work_limit && w->st == KILN_OK)
        w->st = kiln__error(KILN_E_UNSUPPORTED,
                            "grammar: the token mask needs more than %llu units of work (the parse stacks "
                            "this grammar keeps for this text are too many or too deep: a grammar that is "
                            "this ambiguous cannot be applied token by token)",
                            (unsigned long long)w->work_limit);
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

/* Sets are kept in canonical order (sort_set), so equal sets have equal records. */
bool kiln__kg_equal(const kg_work *w, const kg_set *a, const uint32_t *b, size_t b_len, uint32_t b_count) {
    return a->count == b_count && a->end - a->start == b_len &&
           memcmp(w->arena + a->start, b, b_len * sizeof *b) == 0;
}
