/*
 * pretok_rules.c - the pre-tokenizer expressions as hand-written matchers (see pretok.h).
 *
 * Each matcher reproduces a backtracking regex's leftmost-first semantics for one expression: alternatives
 * are tried in order and the first that matches wins; greedy quantifiers take the longest run, giving back
 * only where the expression requires it (\s+(?!\S) leaves the last space for the next word). The classes
 * are those of the Unicode general categories: \p{L} letters, \p{N} numbers, \p{P} punctuation; \s is the
 * White_Space property. The expressions, as published (tokenizer.json / llama.cpp's llama-vocab.cpp):
 *
 *   GPT2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
 *   LLAMA3 (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+          (QWEN2: \p{N} instead of \p{N}{1,3})
 *   default:        [\p{P}\$\+<=>\^~\|]+, GPT2, \p{N}+, [0-9][0-9][0-9]
 *   falcon:         [\p{P}\$\+<=>\^~\|`]+, GPT2, [0-9][0-9][0-9]
 *   starcoder:      \p{N}, GPT2
 *   deepseek-coder: [\r\n], \s?\p{L}+, \s?\p{P}+, [一-龥ࠀ-一가-퟿]+, \p{N}
 *   deepseek-llm:   [\r\n], \s?[<letters>]+, \s?[!-/:-~！-／：-～‘-‟　-。]+, \s+$, [一-龥ࠀ-一가-퟿]+,
 * \p{N}+
 */
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"

static inline uint8_t cls(const kiln__ptext *t, size_t i) {
    return t->flags[i] & KILN__UFLAG_CLASS;
}
static inline bool is_space(const kiln__ptext *t, size_t i, size_t end) {
    return i < end && (t->flags[i] & KILN__UFLAG_SPACE);
}
static inline bool is_letter(const kiln__ptext *t, size_t i, size_t end) {
    return i < end && cls(t, i) == KILN__UCLASS_LETTER;
}
static inline bool is_number(const kiln__ptext *t, size_t i, size_t end) {
    return i < end && cls(t, i) == KILN__UCLASS_NUMBER;
}
static inline bool is_punct(const kiln__ptext *t, size_t i, size_t end) {
    return i < end && cls(t, i) == KILN__UCLASS_PUNCT;
}
static inline bool is_crlf(const kiln__ptext *t, size_t i, size_t end) {
    return i < end && (t->cp[i] == '\r' || t->cp[i] == '\n');
}
/* [^\s\p{L}\p{N}] */
static inline bool is_other(const kiln__ptext *t, size_t i, size_t end) {
    return i < end && !(t->flags[i] & KILN__UFLAG_SPACE) && cls(t, i) != KILN__UCLASS_LETTER &&
           cls(t, i) != KILN__UCLASS_NUMBER;
}
static inline bool is_ascii(const kiln__ptext *t, size_t i, size_t end, uint32_t c) {
    return i < end && t->cp[i] == c;
}

typedef bool (*class_fn)(const kiln__ptext *t, size_t i, size_t end);

static size_t run(const kiln__ptext *t, size_t pos, size_t end, class_fn in) {
    size_t i = pos;
    while (in(t, i, end))
        i++;
    return i - pos;
}

/* X? C+ where X is matched by `lead` (tried first, greedy) and C by `body`. */
static size_t optional_then_run(const kiln__ptext *t, size_t pos, size_t end, class_fn lead, class_fn body) {
    if (lead(t, pos, end) && body(t, pos + 1, end)) return 1 + run(t, pos + 1, end, body);
    return run(t, pos, end, body);
}

static bool is_blank(const kiln__ptext *t, size_t i, size_t end) {
    return is_ascii(t, i, end, ' ');
}

/* 's|'t|'re|'ve|'m|'ll|'d, case-sensitive or not. */
static size_t contraction(const kiln__ptext *t, size_t pos, size_t end, bool any_case) {
    if (!is_ascii(t, pos, end, '\'') || pos + 1 >= end) return 0;
    uint32_t a = t->cp[pos + 1], b = pos + 2 < end ? t->cp[pos + 2] : 0;
    if (any_case) {
        a = a < 0x80 ? kiln__ulower(a) : 0;
        b = b < 0x80 ? kiln__ulower(b) : 0;
    }
    if (a == 's' || a == 't') return 2;
    if ((a == 'r' || a == 'v') && b == 'e') return 3;
    if (a == 'm') return 2;
    if (a == 'l' && b == 'l') return 3;
    if (a == 'd') return 2;
    return 0;
}

/* \s+(?!\S): the whitespace run, minus its last character when something follows it. */
static size_t spaces_not_before_word(const kiln__ptext *t, size_t pos, size_t end) {
    size_t n = run(t, pos, end, is_space);
    if (n == 0) return 0;
    if (pos + n == end) return n;
    return n - 1;
}

static size_t gpt2(const kiln__ptext *t, size_t pos, size_t end) {
    size_t m;
    if ((m = contraction(t, pos, end, false))) return m;
    if ((m = optional_then_run(t, pos, end, is_blank, is_letter))) return m;
    if ((m = optional_then_run(t, pos, end, is_blank, is_number))) return m;
    if ((m = optional_then_run(t, pos, end, is_blank, is_other))) return m;
    return spaces_not_before_word(t, pos, end);
}

/* [^\r\n\p{L}\p{N}] */
static bool not_crlf_letter_number(const kiln__ptext *t, size_t i, size_t end) {
    return i < end && !is_crlf(t, i, end) && cls(t, i) != KILN__UCLASS_LETTER &&
           cls(t, i) != KILN__UCLASS_NUMBER;
}

/* \s*[\r\n]+ : up to and including the last CR/LF of the whitespace run at pos. */
static size_t spaces_to_newline(const kiln__ptext *t, size_t pos, size_t end) {
    size_t n = run(t, pos, end, is_space);
    for (size_t k = n; k > 0; k--)
        if (is_crlf(t, pos + k - 1, end)) return k;
    return 0;
}

static size_t llama3_like(const kiln__ptext *t, size_t pos, size_t end, size_t max_digits) {
    size_t m;
    if ((m = contraction(t, pos, end, true))) return m;
    if ((m = optional_then_run(t, pos, end, not_crlf_letter_number, is_letter))) return m;
    if ((m = run(t, pos, end, is_number))) return KILN__MIN(m, max_digits);
    if ((m = optional_then_run(t, pos, end, is_blank, is_other))) return m + run(t, pos + m, end, is_crlf);
    if ((m = spaces_to_newline(t, pos, end))) return m;
    if ((m = spaces_not_before_word(t, pos, end))) return m;
    return run(t, pos, end, is_space);
}

static size_t llama3(const kiln__ptext *t, size_t pos, size_t end) {
    return llama3_like(t, pos, end, 3);
}

static size_t qwen2(const kiln__ptext *t, size_t pos, size_t end) {
    return llama3_like(t, pos, end, 1);
}

/* [\p{P}\$\+<=>\^~\|]+ and, for falcon, with ` too. */
static bool is_punct_or_math(const kiln__ptext *t, size_t i, size_t end) {
    if (i >= end) return false;
    uint32_t c = t->cp[i];
    return cls(t, i) == KILN__UCLASS_PUNCT || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
           c == '^' || c == '~' || c == '|';
}
static bool is_punct_math_tick(const kiln__ptext *t, size_t i, size_t end) {
    return is_punct_or_math(t, i, end) || is_ascii(t, i, end, '`');
}
static size_t punct_runs(const kiln__ptext *t, size_t pos, size_t end) {
    return run(t, pos, end, is_punct_or_math);
}
static size_t punct_tick_runs(const kiln__ptext *t, size_t pos, size_t end) {
    return run(t, pos, end, is_punct_math_tick);
}

static size_t numbers(const kiln__ptext *t, size_t pos, size_t end) {
    return run(t, pos, end, is_number);
}
static size_t one_number(const kiln__ptext *t, size_t pos, size_t end) {
    return is_number(t, pos, end) ? 1 : 0;
}

/* [0-9][0-9][0-9] */
static bool is_digit(const kiln__ptext *t, size_t i, size_t end) {
    return i < end && t->cp[i] >= '0' && t->cp[i] <= '9';
}
static size_t three_digits(const kiln__ptext *t, size_t pos, size_t end) {
    return is_digit(t, pos, end) && is_digit(t, pos + 1, end) && is_digit(t, pos + 2, end) ? 3 : 0;
}

static size_t one_crlf(const kiln__ptext *t, size_t pos, size_t end) {
    return is_crlf(t, pos, end) ? 1 : 0;
}

static size_t space_letters(const kiln__ptext *t, size_t pos, size_t end) {
    return optional_then_run(t, pos, end, is_space, is_letter);
}
static size_t space_puncts(const kiln__ptext *t, size_t pos, size_t end) {
    return optional_then_run(t, pos, end, is_space, is_punct);
}

/* [一-龥ࠀ-一가-퟿]: U+4E00..U+9FA5, U+0800..U+4E00, U+AC00..U+D7FF. */
static bool is_cjk_hangul(const kiln__ptext *t, size_t i, size_t end) {
    if (i >= end) return false;
    uint32_t c = t->cp[i];
    return (c >= 0x0800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF);
}
static size_t cjk_hangul(const kiln__ptext *t, size_t pos, size_t end) {
    return run(t, pos, end, is_cjk_hangul);
}

/* DeepSeek-LLM's explicit letter class; a White_Space code point never matches a class there. */
static bool is_deepseek_letter(const kiln__ptext *t, size_t i, size_t end) {
    return i < end && t->cp[i] != KILN__UINVALID && kiln__udeepseek_letter(t->cp[i]);
}
/* [!-/:-~！-／：-～‘-‟　-。] */
static bool is_deepseek_punct(const kiln__ptext *t, size_t i, size_t end) {
    if (i >= end || (t->flags[i] & KILN__UFLAG_SPACE)) return false;
    uint32_t c = t->cp[i];
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
           (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
}
static size_t deepseek_letters(const kiln__ptext *t, size_t pos, size_t end) {
    return optional_then_run(t, pos, end, is_space, is_deepseek_letter);
}
static size_t deepseek_puncts(const kiln__ptext *t, size_t pos, size_t end) {
    return optional_then_run(t, pos, end, is_space, is_deepseek_punct);
}
/* \s+$ */
static size_t trailing_spaces(const kiln__ptext *t, size_t pos, size_t end) {
    size_t n = run(t, pos, end, is_space);
    return n > 0 && pos + n == end ? n : 0;
}

static const kiln__pretok_matcher rules_default[] = {punct_runs, gpt2, numbers, three_digits};
static const kiln__pretok_matcher rules_gpt2[] = {gpt2};
static const kiln__pretok_matcher rules_llama3[] = {llama3};
static const kiln__pretok_matcher rules_qwen2[] = {qwen2};
static const kiln__pretok_matcher rules_deepseek_llm[] = {one_crlf,        deepseek_letters, deepseek_puncts,
                                                          trailing_spaces, cjk_hangul,       numbers};
static const kiln__pretok_matcher rules_deepseek_coder[] = {one_crlf, space_letters, space_puncts, cjk_hangul,
                                                            one_number};
static const kiln__pretok_matcher rules_falcon[] = {punct_tick_runs, gpt2, three_digits};
static const kiln__pretok_matcher rules_starcoder[] = {one_number, gpt2};

size_t kiln__pretok_rules(kiln__pretok_kind kind, const kiln__pretok_matcher **out) {
#define RULES(r) (*out = (r), KILN__ARRAY_LEN(r))
    switch (kind) {
    case KILN__PRETOK_DEFAULT: return RULES(rules_default);
    case KILN__PRETOK_GPT2: return RULES(rules_gpt2);
    case KILN__PRETOK_LLAMA3: return RULES(rules_llama3);
    case KILN__PRETOK_QWEN2: return RULES(rules_qwen2);
    case KILN__PRETOK_DEEPSEEK_LLM: return RULES(rules_deepseek_llm);
    case KILN__PRETOK_DEEPSEEK_CODER: return RULES(rules_deepseek_coder);
    case KILN__PRETOK_FALCON: return RULES(rules_falcon);
    case KILN__PRETOK_STARCODER: return RULES(rules_starcoder);
    case KILN__PRETOK_UNKNOWN: break;
    }
#undef RULES
    *out = NULL;
    return 0;
}
