/*
 * dfa.h - a matcher's memo of the recognizer's moves (dfa.c): every set of parse stacks met by a mask walk
 * is interned under a small id, and each move (set id, code point) -> set id is remembered, so the
 * grammar becomes, lazily, a deterministic automaton over the states a generation actually meets. A mask
 * walk from a state the memo has seen (the next position of a bounded string, the next item of a list)
 * then costs one table look-up per trie node instead of a set of stacks built and deduplicated.
 *
 * Memory is bounded: when the memo passes its limits it is emptied at the start of the next mask, and a
 * walk that meets the limits midway goes on without the memo for what is left of that walk.
 */
#ifndef KILN_GRAMMAR_DFA_H
#define KILN_GRAMMAR_DFA_H

#include "grammar/grammar.h"

#define KG_DFA_DEAD UINT32_MAX      /* the move leaves the grammar */
#define KG_DFA_MAX_SETS (1u << 17)  /* interned sets */
#define KG_DFA_MAX_POOL (1u << 22)  /* uint32 words of interned stacks (16 MiB) */
#define KG_DFA_MAX_MOVES (1u << 21) /* remembered moves */

typedef struct kg_dfa_set {
    size_t off, len; /* records in pool */
    uint32_t count;
    uint64_t hash;
} kg_dfa_set;

typedef struct kg_dfa {
    uint32_t *pool;
    size_t pool_len, pool_cap;
    kg_dfa_set *sets;
    uint32_t n_sets, sets_cap;
    uint32_t *set_slots; /* (n_set_slots) id + 1 by hash; 0 = empty */
    uint32_t n_set_slots;
    uint64_t *move_keys; /* (n_move_slots) (id << 21 | cp) + 1; 0 = empty */
    uint32_t *move_vals;
    uint32_t n_move_slots, n_moves;
} kg_dfa;

void kiln__kg_dfa_free(kg_dfa *d);
/* Empty the memo when it is past half its limits (call between walks only: ids change). */
void kiln__kg_dfa_trim(kg_dfa *d);
/* The id of the set s (in w's arena), interning it; UINT32_MAX - 1 when the memo is full or out of memory. */
uint32_t kiln__kg_dfa_intern(kg_dfa *d, const kg_work *w, const kg_set *s);
/* The remembered move from set id by cp: 1 with *next (an id or KG_DFA_DEAD), or 0 when unknown. */
int kiln__kg_dfa_lookup(const kg_dfa *d, uint32_t id, uint32_t cp, uint32_t *next);
/* Remember a move (silently not when the memo is full). */
void kiln__kg_dfa_remember(kg_dfa *d, uint32_t id, uint32_t cp, uint32_t next);

#define KG_DFA_FULL (UINT32_MAX - 1)

#endif
