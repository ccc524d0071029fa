/*
 * grammar.h - the grammar engine's internal structures (docs/grammar.md).
 *
 * A compiled grammar is a flat array of elements, one rule after another. A rule is a list of
 * alternatives separated by KG_ALT and closed by KG_END; an alternative is a sequence of rule references
 * and character matchers. A character matcher is one KG_CHAR (or KG_CHAR_NOT for a negated class)
 * holding a code point, optionally followed by KG_RNG_UPPER (which makes it a range) and by KG_CHAR_ALT
 * elements that add more code points (each again optionally a range); KG_ANY matches any code point.
 * Repetitions were rewritten into generated rules by the parser, so matching sees only sequences,
 * alternatives and references. The parser guarantees that every reference names a defined rule and that
 * no rule is left-recursive (directly or through rules that can match nothing), so expanding a rule
 * reference always terminates.
 *
 * The recognizer (matcher.c) keeps the set of parse stacks that llama.cpp's grammar keeps: each stack is
 * a list of element positions, the top one a character matcher still to be matched, the others where to
 * continue when the rule above ends. An empty stack means the input so far is a complete sentence.
 */
#ifndef KILN_GRAMMAR_H
#define KILN_GRAMMAR_H

#include "core/core.h"

/* Limits (docs/security.md): larger grammars are refused by name. */
#define KG_MAX_RULES 16384u        /* rules, generated ones included */
#define KG_MAX_ELEMENTS (1u << 20) /* elements over all rules */
#define KG_MAX_REPEAT 1000u        /* m and n of x{m,n} */
#define KG_MAX_TEXT (4u << 20)     /* bytes of grammar text */
#define KG_MAX_DEPTH 1024u         /* positions on one parse stack while matching */
#define KG_MEMO_MAX (1u << 16)     /* prefixes and expansions the memo of one set holds (then it stops) */
#define KG_MAX_STACKS 4096u        /* parse stacks alive at once while matching */
/* Work of one mask's walk (kg_work.work: words of parse stacks read and written, and expansion steps, summed
 * over the walk's advances), which bounds its time: about 11 ns a unit on a Zen 1 core, so at most ~0.7 s;
 * the heaviest mask grammar_bench measures (a JSON schema, a 150,000-token vocabulary) takes 407,504. */
#define KG_MAX_MASK_WORK (1ull << 26)
#define KG_MAX_STEPS                                                                                         \
    (1u << 20) /* expansion steps to match one character: nested nullable groups can                         \
                * make the expansion exponential in the nesting (a 664-byte grammar                          \
                * found by fuzz_grammar took a minute), so the work is bounded */

typedef enum kg_type {
    KG_END = 0,       /* end of a rule */
    KG_ALT = 1,       /* start of another alternative */
    KG_REF = 2,       /* value: the rule id */
    KG_CHAR = 3,      /* value: a code point */
    KG_CHAR_NOT = 4,  /* a negated class; value: its first code point */
    KG_RNG_UPPER = 5, /* value: the upper end of the range started by the element before */
    KG_CHAR_ALT = 6,  /* value: another code point of the class */
    KG_ANY = 7,       /* any code point */
} kg_type;

typedef struct kg_elem {
    uint32_t type;
    uint32_t value;
} kg_elem;

struct kiln_grammar {
    kg_elem *elems; /* (n_elems) every rule, one after another */
    uint32_t n_elems;
    uint32_t *rule_start; /* (n_rules) where each rule's first alternative begins */
    uint32_t n_rules;
    uint32_t root; /* the rule named "root" */
};

static inline bool kg_is_rule_end(uint32_t type) {
    return type == KG_END || type == KG_ALT;
}
static inline bool kg_is_char(uint32_t type) {
    return type == KG_CHAR || type == KG_CHAR_NOT || type == KG_ANY;
}

/* Whether the character matcher at pos accepts cp, and (through *next) where the element after it is. */
bool kiln__grammar_match_char(const kg_elem *elems, uint32_t pos, uint32_t cp, uint32_t *next);
/* Whether the matcher at pos accepts some code point in [lo, hi] (for a character whose first bytes came
 * and whose last have not): exact for plain classes, and for a negated class true unless one of its
 * ranges covers all of [lo, hi]. */
bool kiln__grammar_match_range(const kg_elem *elems, uint32_t pos, uint32_t lo, uint32_t hi);

/* A set of parse stacks lives in a kg_work arena as consecutive records [n, pos_0 .. pos_{n-1}] (bottom
 * first, the top last) between start and end; count stacks, distinct, in a canonical order (so equal sets
 * have equal records); an empty stack (n = 0) means "accepting". */
typedef struct kg_set {
    size_t start, end;
    uint32_t count;
    bool accepting;
} kg_set;

/* The working memory of one matcher: an arena used as a stack of sets (the current state at the bottom,
 * the sets of a mask walk above it), the stack being built, and the hash table that keeps a set's stacks
 * distinct. It grows to the largest size needed and is then reused: matching allocates only while it
 * still grows. */
typedef struct kg_work {
    const kiln_grammar *g;
    uint32_t *arena;
    size_t len, cap;
    uint32_t *path;                /* (KG_MAX_DEPTH) the stack being built */
    uint32_t *slot_off, *slot_gen; /* (n_slots) arena offsets of the set being built, by hash */
    uint32_t n_slots, gen;
    size_t building; /* where the set being built starts */
    uint32_t building_count;
    uint32_t steps;         /* expansion steps of the set being built (KG_MAX_STEPS) */
    uint64_t work;          /* work of the advances since it was zeroed: words read and written, steps */
    uint64_t work_limit;    /* passing it is KILN_E_UNSUPPORTED (a mask's bound, KG_MAX_MASK_WORK); 0: none */
    kiln_status st;         /* sticky: out of memory, or a limit of grammar.h passed */
    struct kg_order *order; /* (order_cap) scratch for sorting a finished set */
    uint32_t order_cap;
    /* The expansion memo of the set being built (stacks.c): pid[i] names the prefix path[0..i), interned
     * as (pid[i - 1], path[i - 1]) in an open-addressing table that also records which (prefix, rule
     * reference) pairs were expanded. */
    uint32_t *pid; /* (KG_MAX_DEPTH + 1) valid for i <= pid_valid */
    uint32_t pid_valid;
    uint64_t *memo_key;           /* (memo_slots) */
    uint32_t *memo_id, *memo_gen; /* (memo_slots) */
    uint32_t memo_slots, memo_count, memo_cur;
} kg_work;

kiln_status kiln__kg_work_init(kg_work *w, const kiln_grammar *g);
void kiln__kg_work_free(kg_work *w);
/* Build the set at the start of the grammar (the alternatives of root, expanded) at the arena's end. */
kiln_status kiln__kg_initial(kg_work *w, kg_set *out);
/* Build the set after matching cp from `in` at the arena's end (count 0: cp does not continue it). */
kiln_status kiln__kg_advance(kg_work *w, const kg_set *in, uint32_t cp, kg_set *out);
/* Whether some stack of s (or of the records recs[0..len)) can match some code point in [lo, hi]. */
bool kiln__kg_can_match_range(const kg_work *w, const kg_set *s, uint32_t lo, uint32_t hi);
bool kiln__kg_records_match_range(const kiln_grammar *g, const uint32_t *recs, size_t len, uint32_t lo,
                                  uint32_t hi);
/* A hash of the set's stacks (the same for any order), and set equality (a comparison of records). */
uint64_t kiln__kg_hash(const kg_work *w, const kg_set *s);
bool kiln__kg_equal(const kg_work *w, const kg_set *a, const uint32_t *b_data, size_t b_len,
                    uint32_t b_count);

/* The vocabulary size of a matcher's masks (0 when it has no vocabulary). */
int32_t kiln__grammar_matcher_n_vocab(const kiln_grammar_matcher *m);
/* Test hook: the work one mask may take (default KG_MAX_MASK_WORK), so a test meets the bound quickly. */
void kiln__grammar_matcher_set_mask_work_limit(kiln_grammar_matcher *m, uint64_t limit);

/* Incremental UTF-8 decoding of a token's bytes. */
typedef struct kg_utf8 {
    uint32_t value, min; /* the bits so far; the smallest code point the sequence may encode */
    uint32_t remaining;  /* continuation bytes still to come (0: between characters) */
} kg_utf8;

/* Feed one byte: 1 with *cp when a character completes, 0 when more bytes are needed, -1 when the bytes
 * can never be valid UTF-8 (overlong, surrogate, beyond U+10FFFF, a stray continuation). */
int kiln__kg_utf8_step(kg_utf8 *u, uint8_t byte, uint32_t *cp);
/* The code points a partial sequence can still become: [*lo, *hi]. */
void kiln__kg_utf8_range(const kg_utf8 *u, uint32_t *lo, uint32_t *hi);

/* The token trie of a vocabulary (token_trie.c), in depth-first order: node i's subtree is nodes
 * [i + 1, end[i]), its first child i + 1 (when that is below end[i]), the next sibling of child c end[c].
 * Node 0 is the root (the empty prefix). Tokens whose bytes end at node i are toks[tok_start[i] ..
 * tok_start[i + 1]). Tokens that print nothing, control and unknown tokens and tokens longer than
 * KG_MAX_TOKEN_BYTES are in no node: a grammar never allows them. */
#define KG_MAX_TOKEN_BYTES 512u
struct kiln_grammar_vocab {
    int32_t n_vocab;
    uint32_t n_nodes;
    uint8_t *byte;       /* (n_nodes) the byte leading to the node; root 0 */
    uint32_t *end;       /* (n_nodes) */
    uint32_t *tok_start; /* (n_nodes + 1) */
    int32_t *toks;       /* tokens by node */
    int32_t *end_tokens; /* (n_end) allowed when the grammar can end: EOS, end of turn */
    int32_t n_end;
    uint8_t *token_bytes; /* every token's bytes, one after another */
    uint32_t *token_off;  /* (n_vocab + 1) token t is token_bytes[token_off[t] .. token_off[t + 1]) */
    bool *in_trie;        /* (n_vocab) whether a grammar may ever allow the token as text */
};

#endif
