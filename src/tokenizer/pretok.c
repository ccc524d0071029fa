/*
 * pretok.c - the pre-tokenizer names and the splitting engine (see pretok.h; the matchers are in
 * pretok_rules.c).
 *
 * The engine keeps the pieces as a list of code point counts. For each expression it walks every piece
 * from its start: where the matcher finds a match, the text since the last match (if any) becomes a piece
 * and the match another; where it does not, the scan moves one code point on. Text after the last match is
 * a piece too. This is llama.cpp's unicode_regex_split, so nothing is ever dropped.
 */
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"

#include <string.h>

static const struct {
    const char *name;
    kiln__pretok_kind kind;
} names[] = {
    {"default", KILN__PRETOK_DEFAULT},
    {"gpt-2", KILN__PRETOK_GPT2},
    {"mpt", KILN__PRETOK_GPT2},
    {"olmo", KILN__PRETOK_GPT2},
    {"phi-2", KILN__PRETOK_GPT2},
    {"jais", KILN__PRETOK_GPT2},
    {"roberta-bpe", KILN__PRETOK_GPT2},
    {"llama-bpe", KILN__PRETOK_LLAMA3},
    {"llama3", KILN__PRETOK_LLAMA3},
    {"llama-v3", KILN__PRETOK_LLAMA3},
    {"dbrx", KILN__PRETOK_LLAMA3},
    {"smaug-bpe", KILN__PRETOK_LLAMA3},
    {"qwen2", KILN__PRETOK_QWEN2},
    {"deepseek-r1-qwen", KILN__PRETOK_QWEN2},
    {"stablelm2", KILN__PRETOK_QWEN2},
    {"deepseek-llm", KILN__PRETOK_DEEPSEEK_LLM},
    {"deepseek-coder", KILN__PRETOK_DEEPSEEK_CODER},
    {"falcon", KILN__PRETOK_FALCON},
    {"starcoder", KILN__PRETOK_STARCODER},
    {"refact", KILN__PRETOK_STARCODER},
    {"command-r", KILN__PRETOK_STARCODER},
    {"smollm", KILN__PRETOK_STARCODER},
    {"codeshell", KILN__PRETOK_STARCODER},
};

kiln__pretok_kind kiln__pretok_from_name(const char *name, size_t len) {
    for (size_t i = 0; i < KILN__ARRAY_LEN(names); i++)
        if (strlen(names[i].name) == len && memcmp(names[i].name, name, len) == 0) return names[i].kind;
    return KILN__PRETOK_UNKNOWN;
}

const char *kiln__pretok_known_names(void) {
    return "default, gpt-2, mpt, olmo, phi-2, jais, roberta-bpe, llama-bpe, llama3, llama-v3, dbrx, "
           "smaug-bpe, "
           "qwen2, deepseek-r1-qwen, stablelm2, deepseek-llm, deepseek-coder, falcon, starcoder, refact, "
           "command-r, smollm, codeshell";
}

static kiln_status decode(const char *text, size_t len, kiln__ptext *t) {
    t->cp = kiln__alloc_array(len, sizeof *t->cp);
    t->flags = kiln__alloc(len);
    t->off = kiln__alloc_array(len + 1, sizeof *t->off);
    if (!t->cp || !t->flags || !t->off) return kiln__nomem("pre-tokenizer scratch");
    size_t n = 0;
    for (size_t i = 0; i < len; n++) {
        uint32_t cp;
        size_t k = kiln__utf8_decode((const uint8_t *)text + i, len - i, &cp);
        t->cp[n] = cp;
        t->flags[n] = kiln__uflags(cp == KILN__UINVALID ? 0xFFFD : cp);
        t->off[n] = (uint32_t)i;
        i += k;
    }
    t->off[n] = (uint32_t)len;
    t->n = n;
    return KILN_OK;
}

/* Split every piece of `in` (code point counts, n_in of them) with one matcher into `out`. */
static size_t split_pieces(const kiln__ptext *t, kiln__pretok_matcher match, const uint32_t *in, size_t n_in,
                           uint32_t *out) {
    size_t n_out = 0, start = 0;
    for (size_t p = 0; p < n_in; p++) {
        size_t end = start + in[p], gap = start;
        for (size_t pos = start; pos < end;) {
            size_t m = match(t, pos, end);
            if (m == 0) {
                pos++;
                continue;
            }
            if (pos > gap) out[n_out++] = (uint32_t)(pos - gap);
            out[n_out++] = (uint32_t)m;
            pos += m;
            gap = pos;
        }
        if (end > gap) out[n_out++] = (uint32_t)(end - gap);
        start = end;
    }
    return n_out;
}

kiln_status kiln__pretok_split(kiln__pretok_kind kind, const char *text, size_t len, uint32_t **bounds,
                               size_t *n_words) {
    *bounds = NULL;
    *n_words = 0;
    const kiln__pretok_matcher *rules;
    size_t n_rules = kiln__pretok_rules(kind, &rules);
    if (n_rules == 0) return kiln__error(KILN_E_UNSUPPORTED, "pre-tokenizer: unknown kind %d", (int)kind);
    if (len == 0) return KILN_OK;
    if (len >= UINT32_MAX)
        return kiln__error(KILN_E_RANGE, "tokenize: text of %zu bytes is too long (at most %u)", len,
                           UINT32_MAX - 1);
    kiln__ptext t = {0};
    uint32_t *a = NULL, *b = NULL;
    kiln_status st = decode(text, len, &t);
    if (st == KILN_OK) {
        /* A split never makes more pieces than code points. */
        a = kiln__alloc_array(t.n + 1, sizeof *a);
        b = kiln__alloc_array(t.n + 1, sizeof *b);
        if (!a || !b) st = kiln__nomem("pre-tokenizer scratch");
    }
    if (st == KILN_OK && t.n > 0) {
        size_t n = 1;
        a[0] = (uint32_t)t.n;
        for (size_t r = 0; r < n_rules; r++) {
            n = split_pieces(&t, rules[r], a, n, b);
            uint32_t *swap = a;
            a = b;
            b = swap;
        }
        /* Turn code point counts into byte offsets, in place in b. */
        size_t cp = 0;
        b[0] = 0;
        for (size_t i = 0; i < n; i++) {
            cp += a[i];
            b[i + 1] = t.off[cp];
        }
        *n_words = n;
        *bounds = b;
        b = NULL;
    }
    kiln__dealloc(a);
    kiln__dealloc(b);
    kiln__dealloc(t.cp);
    kiln__dealloc(t.flags);
    kiln__dealloc(t.off);
    return st;
}
