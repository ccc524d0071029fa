/*
 * gbnf_parse.c - GBNF text (llama.cpp's grammar format) -> a compiled kiln_grammar (grammar.h).
 *
 * The format: rules `name ::= alternatives`, one per line (a rule continues onto further lines only
 * inside parentheses or right after `::=` or `|`); alternatives separated by `|`; items are "literals",
 * [character classes] with ranges and ^ negation, `.` (any character), rule names and (groups), each
 * optionally followed by `*`, `+`, `?`, `{m}`, `{m,}` or `{m,n}`; `#` starts a comment; escapes \n \r \t
 * \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH (and a backslash before any other ASCII punctuation stands for that
 * character). Names are letters, digits, '-' and '_'. The rule `root` is where matching starts.
 *
 * Repetitions become generated rules as in llama.cpp: x* is R ::= x R | (nothing); x+ is x R; x? is
 * R ::= x | (nothing); x{m,n} is m copies of x and n - m nested optional rules. Every failure is
 * KILN_E_FORMAT with "grammar: line L, column C: ..." naming what was wrong; a rule used but never
 * defined, a missing root, and a left-recursive rule (which a stack recognizer cannot run) are refused
 * after parsing. Sizes are bounded by the KG_MAX_* limits of grammar.h.
 */
#include "grammar/grammar.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct kg_vec {
    kg_elem *e;
    uint32_t n, cap;
} kg_vec;

typedef struct parser {
    const char *src;
    size_t len, pos;
    kg_vec *rules;     /* (n_rules) bodies; a rule id indexes rules, names, defined, first_use */
    char **names;      /* (n_rules) */
    bool *defined;     /* (n_rules) */
    size_t *first_use; /* (n_rules) where the rule was first referenced or defined */
    uint32_t n_rules, cap_rules, n_elems;
    kiln_status st; /* the first failure; sticky */
} parser;

static void where(const parser *p, size_t at, int *line, int *col) {
    *line = 1, *col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->src[i] == '\n')
            (*line)++, *col = 1;
        else
            (*col)++;
    }
}

static bool fail_at(parser *p, size_t at, const char *fmt, ...) KILN__PRINTF(3, 4);
static bool fail_at(parser *p, size_t at, const char *fmt, ...) {
    if (p->st != KILN_OK) return false;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    where(p, at, &line, &col);
    p->st = kiln__error(KILN_E_FORMAT, "grammar: line %d, column %d: %s", line, col, msg);
    return false;
}

static bool nomem(parser *p) {
    if (p->st == KILN_OK) p->st = kiln__nomem("the grammar");
    return false;
}

static int peek(const parser *p, size_t k) {
    return p->pos + k < p->len ? (unsigned char)p->src[p->pos + k] : -1;
}

static bool is_word(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Spaces, tabs and comments; newlines too when newline_ok. */
static void skip_space(parser *p, bool newline_ok) {
    for (int c; (c = peek(p, 0)) >= 0;) {
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
            p->pos++;
        } else if (c == '#') {
            while (peek(p, 0) >= 0 && peek(p, 0) != '\n' && peek(p, 0) != '\r')
                p->pos++;
        } else {
            break;
        }
    }
}

static bool push(parser *p, uint32_t rule, uint32_t type, uint32_t value) {
    kg_vec *v = &p->rules[rule];
    if (p->n_elems >= KG_MAX_ELEMENTS)
        return fail_at(p, p->pos, "the grammar needs more than %u elements (repetitions included)",
                       KG_MAX_ELEMENTS);
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? 2 * v->cap : 8;
        kg_elem *e = kiln__realloc_array(v->e, cap, sizeof *e);
        if (!e) return nomem(p);
        v->e = e, v->cap = cap;
    }
    v->e[v->n++] = (kg_elem){type, value};
    p->n_elems++;
    return true;
}

/* A new rule named name[0..len) (copied); returns its id, or UINT32_MAX after a failure. */
static uint32_t add_rule(parser *p, const char *name, size_t len) {
    if (p->n_rules >= KG_MAX_RULES) {
        fail_at(p, p->pos, "the grammar needs more than %u rules (generated ones included)", KG_MAX_RULES);
        return UINT32_MAX;
    }
    if (p->n_rules == p->cap_rules) {
        uint32_t cap = p->cap_rules ? 2 * p->cap_rules : 16;
        kg_vec *r = kiln__realloc_array(p->rules, cap, sizeof *r);
        if (r) p->rules = r;
        char **nm = kiln__realloc_array(p->names, cap, sizeof *nm);
        if (nm) p->names = nm;
        bool *d = kiln__realloc_array(p->defined, cap, sizeof *d);
        if (d) p->defined = d;
        size_t *u = kiln__realloc_array(p->first_use, cap, sizeof *u);
        if (u) p->first_use = u;
        if (!r || !nm || !d || !u) return nomem(p), UINT32_MAX;
        p->cap_rules = cap;
    }
    char *copy = kiln__strndup(name, len);
    if (!copy) return nomem(p), UINT32_MAX;
    uint32_t id = p->n_rules++;
    p->rules[id] = (kg_vec){0};
    p->names[id] = copy;
    p->defined[id] = false;
    p->first_use[id] = p->pos;
    return id;
}

/* The rule named name[0..len) (which appears at text offset `at`), added when new. */
static uint32_t find_or_add(parser *p, const char *name, size_t len, size_t at) {
    for (uint32_t i = 0; i < p->n_rules; i++)
        if (strlen(p->names[i]) == len && memcmp(p->names[i], name, len) == 0) return i;
    uint32_t id = add_rule(p, name, len);
    if (id != UINT32_MAX) p->first_use[id] = at;
    return id;
}

/* A generated rule, named after the rule it serves ("value/3": a '/' no rule name can hold). */
static uint32_t add_generated(parser *p, uint32_t parent) {
    char name[96];
    int n = snprintf(name, sizeof name, "%.64s/%u", p->names[parent], p->n_rules);
    uint32_t id = add_rule(p, name, (size_t)n);
    if (id != UINT32_MAX) p->defined[id] = true;
    return id;
}

static int hex_value(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 character of the source. */
static bool decode_utf8(parser *p, uint32_t *cp) {
    int c = peek(p, 0);
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0) return fail_at(p, p->pos, "invalid UTF-8 byte 0x%02X", (unsigned)c);
    uint32_t v = n == 0 ? (uint32_t)c : (uint32_t)c & (0x3Fu >> n);
    for (int i = 1; i <= n; i++) {
        int b = peek(p, (size_t)i);
        if (b < 0 || (b & 0xC0) != 0x80) return fail_at(p, p->pos, "invalid UTF-8 sequence");
        v = v << 6 | ((uint32_t)b & 0x3F);
    }
    static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
    if (v < min_cp[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return fail_at(p, p->pos, "invalid UTF-8 sequence");
    p->pos += (size_t)n + 1;
    *cp = v;
    return true;
}

/* One character of a literal or class, escapes decoded. */
static bool parse_char(parser *p, uint32_t *cp) {
    if (peek(p, 0) != '\\') return decode_utf8(p, cp);
    size_t at = p->pos;
    int e = peek(p, 1);
    p->pos += 2;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = hex_value(peek(p, 0));
            if (h < 0) return fail_at(p, at, "\\%c needs %d hexadecimal digits", e, digits);
            v = v << 4 | (uint32_t)h;
            p->pos++;
        }
        if (v > 0x10FFFF) return fail_at(p, at, "escape \\%c%X is beyond U+10FFFF", e, v);
        *cp = v;
        return true;
    }
    switch (e) {
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case 'f': *cp = '\f'; return true;
    case 'b': *cp = '\b'; return true;
    default: break;
    }
    if (e > ' ' && e < 0x7F && !is_word(e)) {
        *cp = (uint32_t)e;
        return true;
    }
    if (e < 0) return fail_at(p, at, "the grammar ends inside an escape");
    return fail_at(p, at, "unknown escape '\\%c'", e >= ' ' && e < 0x7F ? e : '?');
}

static bool parse_literal(parser *p, uint32_t rule) {
    size_t start = p->pos++;
    while (peek(p, 0) != '"') {
        uint32_t cp;
        if (peek(p, 0) < 0) return fail_at(p, start, "unterminated string literal");
        if (!parse_char(p, &cp) || !push(p, rule, KG_CHAR, cp)) return false;
    }
    p->pos++;
    return true;
}

static bool parse_class(parser *p, uint32_t rule) {
    size_t start = p->pos++;
    bool negate = peek(p, 0) == '^', first = true;
    if (negate) p->pos++;
    while (peek(p, 0) != ']') {
        uint32_t lo, hi;
        if (peek(p, 0) < 0) return fail_at(p, start, "unterminated character class");
        if (!parse_char(p, &lo)) return false;
        if (!push(p, rule, first ? (negate ? KG_CHAR_NOT : KG_CHAR) : KG_CHAR_ALT, lo)) return false;
        first = false;
        if (peek(p, 0) == '-' && peek(p, 1) != ']' && peek(p, 1) >= 0) {
            size_t at = p->pos++;
            if (!parse_char(p, &hi)) return false;
            if (hi < lo) return fail_at(p, at, "range U+%04X-U+%04X is reversed", lo, hi);
            if (!push(p, rule, KG_RNG_UPPER, hi)) return false;
        }
    }
    p->pos++;
    if (first && !negate) return fail_at(p, start, "empty character class '[]' matches nothing");
    return !first || push(p, rule, KG_ANY, 0); /* [^] is any character */
}

static bool parse_uint(parser *p, uint32_t *out) {
    size_t at = p->pos;
    uint32_t v = 0;
    if (peek(p, 0) < '0' || peek(p, 0) > '9') return fail_at(p, at, "expected a number in {m,n}");
    while (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
        v = v * 10 + (uint32_t)(peek(p, 0) - '0');
        if (v > KG_MAX_REPEAT) return fail_at(p, at, "a repetition count above %u", KG_MAX_REPEAT);
        p->pos++;
    }
    *out = v;
    return true;
}

/* {m}, {m,} or {m,n} after '{'; max UINT32_MAX for no upper bound. */
static bool parse_braces(parser *p, uint32_t *min, uint32_t *max) {
    size_t at = p->pos++;
    skip_space(p, false);
    if (!parse_uint(p, min)) return false;
    skip_space(p, false);
    *max = *min;
    if (peek(p, 0) == ',') {
        p->pos++;
        skip_space(p, false);
        *max = UINT32_MAX;
        if (peek(p, 0) != '}' && !parse_uint(p, max)) return false;
        skip_space(p, false);
    }
    if (peek(p, 0) != '}') return fail_at(p, at, "expected '}' to close the repetition");
    p->pos++;
    if (*max < *min)
        return fail_at(p, at, "repetition {%u,%u} has its maximum below its minimum", *min, *max);
    return true;
}

/* Replace the last item, elements [start, n) of rule, by min copies and up to max - min more. */
static bool repeat(parser *p, uint32_t rule, uint32_t start, uint32_t min, uint32_t max) {
    uint32_t n_item = p->rules[rule].n - start;
    if (n_item == 0) return true; /* "" repeated is still nothing */
    kg_elem *item = kiln__alloc_array(n_item, sizeof *item);
    if (!item) return nomem(p);
    memcpy(item, p->rules[rule].e + start, n_item * sizeof *item);
    p->rules[rule].n = start;
    p->n_elems -= n_item;
    bool ok = true;
    for (uint32_t i = 0; ok && i < min; i++)
        for (uint32_t j = 0; ok && j < n_item; j++)
            ok = push(p, rule, item[j].type, item[j].value);
    uint32_t tail = UINT32_MAX;    /* the rule for what may follow the required copies */
    if (ok && max == UINT32_MAX) { /* R ::= item R | */
        if ((tail = add_generated(p, rule)) == UINT32_MAX) ok = false;
        for (uint32_t j = 0; ok && j < n_item; j++)
            ok = push(p, tail, item[j].type, item[j].value);
        ok = ok && push(p, tail, KG_REF, tail) && push(p, tail, KG_ALT, 0) && push(p, tail, KG_END, 0);
    } else {
        for (uint32_t k = min; ok && k < max; k++) { /* R_k ::= item R_{k-1} | */
            uint32_t r = add_generated(p, rule);
            if (r == UINT32_MAX) ok = false;
            for (uint32_t j = 0; ok && j < n_item; j++)
                ok = push(p, r, item[j].type, item[j].value);
            ok = ok && (tail == UINT32_MAX || push(p, r, KG_REF, tail)) && push(p, r, KG_ALT, 0) &&
                 push(p, r, KG_END, 0);
            tail = r;
        }
    }
    if (ok && tail != UINT32_MAX) ok = push(p, rule, KG_REF, tail);
    kiln__dealloc(item);
    return ok;
}

static bool parse_alternates(parser *p, uint32_t rule, bool nested);

static bool parse_group(parser *p, uint32_t rule) {
    size_t start = p->pos++;
    skip_space(p, true);
    uint32_t sub = add_generated(p, rule);
    if (sub == UINT32_MAX || !parse_alternates(p, sub, true) || !push(p, sub, KG_END, 0)) return false;
    if (peek(p, 0) != ')') return fail_at(p, start, "expected ')' to close the group opened here");
    p->pos++;
    return push(p, rule, KG_REF, sub);
}

static bool parse_sequence(parser *p, uint32_t rule, bool nested) {
    uint32_t last = UINT32_MAX; /* where the last item's elements start */
    for (int c; (c = peek(p, 0)) >= 0 && p->st == KILN_OK;) {
        uint32_t here = p->rules[rule].n, min = 0, max = 0;
        if (c == '"' || c == '[' || c == '(' || c == '.' || is_word(c)) {
            bool ok;
            if (c == '"')
                ok = parse_literal(p, rule);
            else if (c == '[')
                ok = parse_class(p, rule);
            else if (c == '(')
                ok = parse_group(p, rule);
            else if (c == '.')
                p->pos++, ok = push(p, rule, KG_ANY, 0);
            else {
                size_t s = p->pos;
                while (is_word(peek(p, 0)))
                    p->pos++;
                uint32_t id = find_or_add(p, p->src + s, p->pos - s, s);
                ok = id != UINT32_MAX && push(p, rule, KG_REF, id);
            }
            if (!ok) return false;
            last = here;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == UINT32_MAX) return fail_at(p, p->pos, "'%c' has nothing before it to repeat", c);
            if (c == '{') {
                if (!parse_braces(p, &min, &max)) return false;
            } else {
                p->pos++;
                min = c == '+' ? 1 : 0;
                max = c == '?' ? 1 : UINT32_MAX;
            }
            if (!repeat(p, rule, last, min, max)) return false;
            last = UINT32_MAX;
        } else {
            break;
        }
        skip_space(p, nested);
    }
    return p->st == KILN_OK;
}

static bool parse_alternates(parser *p, uint32_t rule, bool nested) {
    if (!parse_sequence(p, rule, nested)) return false;
    while (peek(p, 0) == '|') {
        p->pos++;
        skip_space(p, true);
        if (!push(p, rule, KG_ALT, 0) || !parse_sequence(p, rule, nested)) return false;
    }
    return true;
}

static bool parse_rule(parser *p) {
    size_t start = p->pos;
    while (is_word(peek(p, 0)))
        p->pos++;
    if (p->pos == start) return fail_at(p, start, "expected a rule name");
    uint32_t id = find_or_add(p, p->src + start, p->pos - start, start);
    if (id == UINT32_MAX) return false;
    if (p->defined[id]) return fail_at(p, start, "rule '%s' is defined twice", p->names[id]);
    p->defined[id] = true;
    p->first_use[id] = start;
    skip_space(p, false);
    if (!(peek(p, 0) == ':' && peek(p, 1) == ':' && peek(p, 2) == '='))
        return fail_at(p, p->pos, "expected '::=' after the rule name '%s'", p->names[id]);
    p->pos += 3;
    skip_space(p, true);
    if (!parse_alternates(p, id, false) || !push(p, id, KG_END, 0)) return false;
    int c = peek(p, 0);
    if (c >= 0 && c != '\n' && c != '\r')
        return fail_at(p, p->pos, "unexpected '%c' in rule '%s'", c >= ' ' && c < 0x7F ? c : '?',
                       p->names[id]);
    skip_space(p, true);
    return true;
}

/* Rules that can match the empty string, to a fixed point. */
static void find_nullable(const parser *p, bool *nullable) {
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < p->n_rules; r++) {
            if (nullable[r]) continue;
            const kg_vec *v = &p->rules[r];
            bool all = true, empty_alt = false;
            for (uint32_t i = 0; i < v->n && !empty_alt; i++) {
                uint32_t t = v->e[i].type;
                if (kg_is_rule_end(t)) {
                    empty_alt = all;
                    all = true;
                } else if (!(t == KG_REF && nullable[v->e[i].value])) {
                    all = false;
                }
            }
            if (empty_alt) nullable[r] = changed = true;
        }
    }
}

/* The rules reachable from r at the left edge of an alternative (through nullable prefixes), each once. */
static uint32_t left_edges(const parser *p, const bool *nullable, uint32_t r, uint32_t *out) {
    const kg_vec *v = &p->rules[r];
    uint32_t n = 0;
    bool at_left = true;
    for (uint32_t i = 0; i < v->n; i++) {
        uint32_t t = v->e[i].type;
        if (kg_is_rule_end(t)) {
            at_left = true;
        } else if (!at_left) {
            continue;
        } else if (t == KG_REF) {
            out[n++] = v->e[i].value;
            at_left = nullable[v->e[i].value];
        } else if (kg_is_char(t)) {
            at_left = false;
        }
    }
    return n;
}

/* Depth-first search over left edges with an explicit stack; a back edge is left recursion. */
static bool check_left_recursion(parser *p) {
    uint32_t n = p->n_rules;
    bool *nullable = kiln__calloc(n, sizeof *nullable);
    uint8_t *color = kiln__calloc(n, 1); /* 0 new, 1 on the path, 2 done */
    uint32_t *stack = kiln__alloc_array(n, sizeof *stack), *edge_at = kiln__alloc_array(n, sizeof *edge_at);
    uint32_t *edges = kiln__alloc_array(p->n_elems + 1, sizeof *edges);
    uint32_t *edge_start = kiln__alloc_array((size_t)n + 1, sizeof *edge_start);
    bool ok = nullable && color && stack && edge_at && edges && edge_start;
    if (!ok) nomem(p);
    if (ok) {
        find_nullable(p, nullable);
        uint32_t total = 0;
        for (uint32_t r = 0; r < n; r++) {
            edge_start[r] = total;
            total += left_edges(p, nullable, r, edges + total);
        }
        edge_start[n] = total;
    }
    for (uint32_t s = 0; ok && s < n; s++) {
        if (color[s]) continue;
        uint32_t depth = 0;
        stack[depth] = s, edge_at[depth++] = edge_start[s], color[s] = 1;
        while (ok && depth > 0) {
            uint32_t r = stack[depth - 1];
            if (edge_at[depth - 1] == edge_start[r + 1]) {
                color[r] = 2, depth--;
                continue;
            }
            uint32_t next = edges[edge_at[depth - 1]++];
            if (color[next] == 1)
                ok = fail_at(
                    p, p->first_use[next],
                    "rule '%s' is left-recursive (directly or through rules that can match "
                    "nothing, such as x* where x can be empty); rewrite it to consume a character first",
                    p->names[next]);
            else if (color[next] == 0)
                stack[depth] = next, edge_at[depth++] = edge_start[next], color[next] = 1;
        }
    }
    kiln__dealloc(nullable);
    kiln__dealloc(color);
    kiln__dealloc(stack);
    kiln__dealloc(edge_at);
    kiln__dealloc(edges);
    kiln__dealloc(edge_start);
    return ok;
}

static bool finish(parser *p, kiln_grammar *g) {
    uint32_t root = UINT32_MAX;
    for (uint32_t i = 0; i < p->n_rules; i++) {
        if (!p->defined[i])
            return fail_at(p, p->first_use[i], "rule '%s' is used but never defined", p->names[i]);
        if (strcmp(p->names[i], "root") == 0) root = i;
    }
    if (root == UINT32_MAX) return fail_at(p, p->len, "the grammar has no rule named 'root'");
    if (!check_left_recursion(p)) return false;
    g->elems = kiln__alloc_array(p->n_elems, sizeof *g->elems);
    g->rule_start = kiln__alloc_array(p->n_rules, sizeof *g->rule_start);
    if (!g->elems || !g->rule_start) return nomem(p);
    uint32_t at = 0;
    for (uint32_t i = 0; i < p->n_rules; i++) {
        g->rule_start[i] = at;
        memcpy(g->elems + at, p->rules[i].e, p->rules[i].n * sizeof *g->elems);
        at += p->rules[i].n;
    }
    g->n_elems = at;
    g->n_rules = p->n_rules;
    g->root = root;
    return true;
}

static void parser_free(parser *p) {
    for (uint32_t i = 0; i < p->n_rules; i++) {
        kiln__dealloc(p->rules[i].e);
        kiln__dealloc(p->names[i]);
    }
    kiln__dealloc(p->rules);
    kiln__dealloc(p->names);
    kiln__dealloc(p->defined);
    kiln__dealloc(p->first_use);
}

kiln_status kiln_grammar_parse(const char *text, size_t len, kiln_grammar **out) {
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_grammar_parse: out is NULL");
    *out = NULL;
    if (!text && len) return kiln__error(KILN_E_INVALID_ARG, "kiln_grammar_parse: text is NULL");
    if (len > KG_MAX_TEXT)
        return kiln__error(KILN_E_FORMAT, "grammar: %zu bytes of text; at most %u are accepted", len,
                           KG_MAX_TEXT);
    parser p = {.src = text, .len = len, .st = KILN_OK};
    kiln_grammar *g = kiln__calloc(1, sizeof *g);
    if (!g) return kiln__nomem("the grammar");
    skip_space(&p, true);
    while (p.pos < p.len && parse_rule(&p)) {
    }
    if (p.st == KILN_OK) finish(&p, g);
    parser_free(&p);
    if (p.st != KILN_OK) {
        kiln_grammar_destroy(g);
        return p.st;
    }
    *out = g;
    return KILN_OK;
}

void kiln_grammar_destroy(kiln_grammar *grammar) {
    if (!grammar) return;
    kiln__dealloc(grammar->elems);
    kiln__dealloc(grammar->rule_start);
    kiln__dealloc(grammar);
}
