/*
 * test_grammar.c - the grammar engine (docs/grammar.md): GBNF parsing with named errors, the stack
 * recognizer accepting and refusing texts, partial UTF-8 across tokens, and token masks: the trie walk
 * must allow exactly the tokens that accepting each token's bytes one by one allows (checked over every
 * token of the test vocabularies), and the end token exactly when the text is complete.
 */
#include "harness.h"

#include "grammar/grammar.h"

#include <stdlib.h>

static kiln_grammar *parse(const char *text) {
    kiln_grammar *g = NULL;
    CHECK_OK(kiln_grammar_parse(text, strlen(text), &g));
    return g;
}

/* Whether the whole text is a sentence of the grammar (accepted and complete). */
static bool sentence(const kiln_grammar *g, const char *text) {
    kiln_grammar_matcher *m = NULL;
    CHECK_OK(kiln_grammar_matcher_create(g, NULL, &m));
    bool ok = m && kiln_grammar_matcher_accept_text(m, text, strlen(text)) == KILN_OK &&
              kiln_grammar_matcher_can_end(m);
    kiln_grammar_matcher_destroy(m);
    return ok;
}

/* Whether the text is a prefix of some sentence. */
static bool prefix(const kiln_grammar *g, const char *text) {
    kiln_grammar_matcher *m = NULL;
    CHECK_OK(kiln_grammar_matcher_create(g, NULL, &m));
    bool ok = m && kiln_grammar_matcher_accept_text(m, text, strlen(text)) == KILN_OK;
    kiln_grammar_matcher_destroy(m);
    return ok;
}

static void parse_error(const char *text, const char *fragment) {
    kiln_grammar *g = NULL;
    kiln_status st = kiln_grammar_parse(text, strlen(text), &g);
    if (st != KILN_E_FORMAT) harness_fail(__FILE__, __LINE__, "'%s' parsed (%s)", text, kiln_status_name(st));
    CHECK(g == NULL);
    CHECK_ERROR_MENTIONS(fragment);
}

static void refuses_malformed_grammars_by_name(void) {
    parse_error("", "no rule named 'root'");
    parse_error("root ::= foo", "line 1, column 10: rule 'foo' is used but never defined");
    parse_error("root ::= \"abc", "unterminated string literal");
    parse_error("root ::= [abc", "unterminated character class");
    parse_error("root ::= []", "empty character class");
    parse_error("root ::= [z-a]", "reversed");
    parse_error("root ::= (\"a\"", "expected ')'");
    parse_error("root = \"a\"", "expected '::='");
    parse_error("root ::= * \"a\"", "nothing before it to repeat");
    parse_error("root ::= \"a\"{3,1}", "maximum below its minimum");
    parse_error("root ::= \"a\"{2000}", "repetition count above 1000");
    parse_error("root ::= \"a\"{1,", "expected a number");
    parse_error("root ::= \"\\q\"", "unknown escape");
    parse_error("root ::= \"\\x4\"", "hexadecimal digits");
    parse_error("root ::= \"a\" )", "unexpected ')'");
    parse_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice");
    parse_error("root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive");
    parse_error("root ::= x \"a\"\nx ::= y\ny ::= \"\" | root", "left-recursive");
    parse_error("root ::= (\"\")*", "left-recursive");
    parse_error("root ::= \"\xff\"", "invalid UTF-8");
}

static void matches_literals_classes_and_repetitions(void) {
    kiln_grammar *g = parse("root ::= \"ab\" [0-9]+ (\"x\" | \"yz\")? [^a-c]{2,3} .\n");
    CHECK(sentence(g, "ab1xdd!"));
    CHECK(sentence(g, "ab123yzddd\xC3\xA9"));
    CHECK(sentence(g, "ab9zz1"));
    CHECK(!sentence(g, "ab"));
    CHECK(!sentence(g, "abxdd!"));     /* one digit at least */
    CHECK(!sentence(g, "ab1xad!"));    /* a is excluded */
    CHECK(!sentence(g, "ab1xddddd!")); /* at most 3 then one any */
    CHECK(prefix(g, "ab12"));
    CHECK(!prefix(g, "b"));
    kiln_grammar_destroy(g);

    g = parse("root ::= \"a\"{3} \"b\"{0,2} \"c\"{2,} \"\\u00e9\\x41\\n\\\"\"");
    CHECK(sentence(g, "aaacc\xC3\xA9"
                      "A\n\""));
    CHECK(sentence(g, "aaabbccccc\xC3\xA9"
                      "A\n\""));
    CHECK(!sentence(g, "aacc\xC3\xA9"
                       "A\n\""));
    CHECK(!sentence(g, "aaabbbcc\xC3\xA9"
                       "A\n\""));
    CHECK(!sentence(g, "aaac\xC3\xA9"
                       "A\n\""));
    kiln_grammar_destroy(g);
}

static void follows_rules_comments_and_empty_alternatives(void) {
    kiln_grammar *g = parse("# a comment\nroot ::= greeting (\" \" name)? # trailing\n"
                            "greeting ::= \"hi\" | \"hello\"\n\nname ::=\n  [A-Z] [a-z]* |\n  \"you\"\n");
    CHECK(sentence(g, "hi"));
    CHECK(sentence(g, "hello Ada"));
    CHECK(sentence(g, "hi you"));
    CHECK(!sentence(g, "hi ada"));
    CHECK(!sentence(g, "hey"));
    kiln_grammar_destroy(g);
}

static char *read_grammar(const char *name, kiln_grammar **g) {
    char path[512];
    snprintf(path, sizeof path, "grammars/%s", name);
    size_t n = 0;
    char *text = harness_read_file(harness_data_path(path), &n);
    CHECK(text != NULL);
    *g = NULL;
    if (text) CHECK_OK(kiln_grammar_parse(text, n, g));
    return text;
}

static void runs_llama_cpp_style_grammar_files(void) {
    kiln_grammar *g;
    free(read_grammar("arithmetic.gbnf", &g));
    CHECK(sentence(g, "1+2= 3\n"));
    CHECK(sentence(g, "(x*4)-y2= z\n"));
    CHECK(!sentence(g, "1+= 3\n"));
    CHECK(!sentence(g, "1+2=3"));
    kiln_grammar_destroy(g);
    free(read_grammar("list.gbnf", &g));
    CHECK(sentence(g, "- milk\n- eggs\n"));
    CHECK(!sentence(g, "- \n"));
    CHECK(!sentence(g, "* milk\n"));
    kiln_grammar_destroy(g);
    free(read_grammar("json.gbnf", &g));
    CHECK(sentence(g, "{\"a\": [1, 2.5e3, -0.5, true, null], \"b\": {\"c\": \"\\u00e9\\n\"}}"));
    CHECK(sentence(g, "{}"));
    CHECK(!sentence(g, "{\"a\" 1}"));
    CHECK(!sentence(g, "{\"a\": 01}"));
    CHECK(!sentence(g, "[1]"));
    CHECK(!sentence(g, "{\"a\": \"x\ny\"}"));
    CHECK(prefix(g, "{\"key\": [1, {\"x\": \"unfinished"));
    kiln_grammar_destroy(g);
}

static void carries_partial_utf8_between_pieces(void) {
    kiln_grammar *g = parse("root ::= \"\xC3\xA9\" [\xE2\x82\xAC-\xE2\x82\xAF]");
    kiln_grammar_matcher *m = NULL;
    CHECK_OK(kiln_grammar_matcher_create(g, NULL, &m));
    CHECK_OK(kiln_grammar_matcher_accept_text(m, "\xC3", 1));
    CHECK(!kiln_grammar_matcher_can_end(m));
    CHECK_OK(kiln_grammar_matcher_accept_text(m, "\xA9\xE2", 2));
    CHECK_STATUS(kiln_grammar_matcher_accept_text(m, "\x83", 1),
                 KILN_E_INVALID_ARG); /* U+20C0.. out of range */
    CHECK_OK(kiln_grammar_matcher_accept_text(m, "\x82", 1));
    CHECK_STATUS(kiln_grammar_matcher_accept_text(m, "A", 1), KILN_E_INVALID_ARG); /* not a continuation */
    CHECK_ERROR_MENTIONS("not valid UTF-8");
    CHECK_OK(kiln_grammar_matcher_accept_text(m, "\xAC", 1));
    CHECK(kiln_grammar_matcher_can_end(m));
    CHECK(kiln_grammar_matcher_is_done(m));
    CHECK_OK(kiln_grammar_matcher_reset(m));
    CHECK_STATUS(kiln_grammar_matcher_accept_text(m, "e", 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("U+0065 at byte 0 is not allowed");
    kiln_grammar_matcher_destroy(m);
    kiln_grammar_destroy(g);
}

static void refuses_runaway_ambiguity_by_name(void) {
    /* Every split of n a's into groups is a distinct parse: the stack set stays bounded by dedup. */
    kiln_grammar *g = parse("root ::= (x | y)*\nx ::= \"a\"\ny ::= \"a\" | \"aa\"");
    CHECK(sentence(g, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
    kiln_grammar_destroy(g);
    g = parse("root ::= a\na ::= \"(\" a \")\" | \"x\"");
    char deep[4100];
    memset(deep, '(', 2048);
    deep[2048] = 0;
    kiln_grammar_matcher *m = NULL;
    CHECK_OK(kiln_grammar_matcher_create(g, NULL, &m));
    CHECK_STATUS(kiln_grammar_matcher_accept_text(m, deep, strlen(deep)), KILN_E_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("deeper than");
    kiln_grammar_matcher_destroy(m);
    kiln_grammar_destroy(g);
    /* Hundreds of nested groups around a nullable repetition (fuzz_grammar's input, split at its 0xFF into
     * grammar and text): expanding one character took a minute before the work was bounded; now the
     * text is refused by name (or matched) at once. */
    char *text = read_grammar("nested_nullable.gbnf", &g);
    size_t n = 0;
    char *input = harness_read_file(harness_data_path("grammars/nested_nullable.txt"), &n);
    m = NULL;
    if (g) CHECK_OK(kiln_grammar_matcher_create(g, NULL, &m));
    kiln_status st = KILN_OK;
    for (size_t i = 0; m && input && i < n && st == KILN_OK; i++)
        st = kiln_grammar_matcher_accept_text(m, input + i, 1);
    CHECK(st == KILN_OK || st == KILN_E_INVALID_ARG || st == KILN_E_UNSUPPORTED);
    if (st == KILN_E_UNSUPPORTED) CHECK_ERROR_MENTIONS("too ambiguous");
    kiln_grammar_matcher_destroy(m);
    kiln_grammar_destroy(g);
    free(input);
    free(text);
}

/* A grammar in which every character can close any of the groups still open (fuzz_grammar's timeout of the
 * seventh session: this rule with .{0,3} and 950 bytes of text took 7 s a mask over 512 tokens) keeps more
 * parse stacks, and deeper ones, the more text it has seen, and a mask walks them for every token prefix:
 * its work grows with the square of the text. Each mask's walk is bounded (KG_MAX_MASK_WORK): past the
 * bound it is refused by name, and the state is as it was: under the default bound the same matcher's mask
 * is the one a fresh matcher makes, and the text goes on. */
static void a_mask_past_its_work_bound_is_refused_by_name(void) {
    kiln_grammar *g = parse("root ::= \"\" | [^] root .{0,3}");
    kiln_gguf *f = NULL;
    kiln_vocab *vocab = NULL;
    kiln_grammar_vocab *gv = NULL;
    kiln_grammar_matcher *m = NULL, *fresh = NULL;
    const uint32_t *bits, *want;
    char text[16];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)('a' + i % 7);
    CHECK_OK(kiln_gguf_open(harness_data_path("vocab/ggml-vocab-llama-spm.gguf"), &f));
    CHECK_OK(kiln_vocab_create(f, &vocab));
    CHECK_OK(kiln_grammar_vocab_create(vocab, NULL, 0, &gv));
    if (!g || !gv) goto done;
    CHECK_OK(kiln_grammar_matcher_create(g, gv, &m));
    CHECK_OK(kiln_grammar_matcher_create(g, gv, &fresh));
    if (!m || !fresh) goto done;
    CHECK_OK(kiln_grammar_matcher_accept_text(m, text, sizeof text));
    CHECK_OK(kiln_grammar_matcher_accept_text(fresh, text, sizeof text));
    kiln__grammar_matcher_set_mask_work_limit(m, 100000); /* these 16 characters: 4 to 8 million */
    CHECK_STATUS(kiln_grammar_matcher_mask(m, &bits), KILN_E_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("units of work");
    kiln__grammar_matcher_set_mask_work_limit(m, KG_MAX_MASK_WORK);
    CHECK_OK(kiln_grammar_matcher_mask(m, &bits));
    CHECK_OK(kiln_grammar_matcher_mask(fresh, &want));
    CHECK(memcmp(bits, want, (size_t)(kiln_grammar_vocab_n_tokens(gv) + 31) / 32 * 4) == 0);
    CHECK(bits[0] || bits[1]); /* [^] allows every character: some token is allowed */
    CHECK_OK(kiln_grammar_matcher_accept_text(m, "xyz", 3));
done:
    kiln_grammar_matcher_destroy(m);
    kiln_grammar_matcher_destroy(fresh);
    kiln_grammar_vocab_destroy(gv);
    kiln_vocab_destroy(vocab);
    kiln_gguf_close(f);
    kiln_grammar_destroy(g);
}

/* Thirty nullable references in a row, each with two ways to match nothing, reach the "a" or "b" after
 * them along 2^30 paths; the matcher expands each reference once per stack below it, so such grammars
 * (a JSON object of many optional fields compiles to one) match in a few steps per character. Without
 * that memo the first character passes KG_MAX_STEPS and is refused as too ambiguous. */
static void nullable_references_in_a_row_expand_once(void) {
    kiln_grammar *g = parse("root ::= (\"a\" y{30})+ \"b\"\ny ::= \"c\"? | \"d\"?");
    CHECK(sentence(g, "ab"));
    CHECK(sentence(g, "acdcdcdacdb"));
    CHECK(sentence(g, "accccccccccccccccccccccccccccccab")); /* 30 c's: every y used */
    CHECK(!prefix(g, "acccccccccccccccccccccccccccccccb"));  /* 31 c's: one too many */
    CHECK(!prefix(g, "acdx"));
    CHECK(!sentence(g, "acd"));
    kiln_grammar_destroy(g);
}

/* The mask equals accepting each token's text on a fresh copy of the state, for every token. */
static void check_mask_against_per_token(const kiln_grammar *g, const kiln_grammar_vocab *gv,
                                         const kiln_vocab *vocab, const char *state_text) {
    kiln_grammar_matcher *m = NULL, *ref = NULL;
    CHECK_OK(kiln_grammar_matcher_create(g, gv, &m));
    CHECK_OK(kiln_grammar_matcher_create(g, gv, &ref));
    CHECK_OK(kiln_grammar_matcher_accept_text(m, state_text, strlen(state_text)));
    const uint32_t *bits = NULL;
    CHECK_OK(kiln_grammar_matcher_mask(m, &bits));
    int32_t n = kiln_vocab_n_tokens(vocab), eos = kiln_vocab_eos(vocab), allowed = 0, mismatches = 0;
    for (int32_t t = 0; t < n && bits; t++) {
        bool in_mask = bits[t >> 5] >> (t & 31) & 1u;
        CHECK_OK(kiln_grammar_matcher_reset(ref));
        CHECK_OK(kiln_grammar_matcher_accept_text(ref, state_text, strlen(state_text)));
        bool expect = kiln_grammar_matcher_accept(ref, t) == KILN_OK;
        if (t == eos) CHECK(expect == kiln_grammar_matcher_can_end(m));
        if (in_mask != expect && mismatches++ < 5)
            harness_fail(__FILE__, __LINE__, "state '%s' token %d: mask %d, accept %d", state_text, t,
                         in_mask, expect);
        allowed += in_mask;
    }
    CHECK(allowed > 0);
    kiln_grammar_matcher_destroy(m);
    kiln_grammar_matcher_destroy(ref);
}

static void masks_equal_per_token_matching(void) {
    const char *vocabs[] = {"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf"};
    kiln_grammar *json;
    free(read_grammar("json.gbnf", &json));
    kiln_grammar *utf = parse("root ::= \"\xC3\xA9t\xC3\xA9 \" [\xE4\xB8\x80-\xE9\xBF\xBF]+ \"!\"");
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
        kiln_gguf *f = NULL;
        kiln_vocab *vocab = NULL;
        kiln_grammar_vocab *gv = NULL;
        CHECK_OK(kiln_gguf_open(harness_data_path(vocabs[i]), &f));
        CHECK_OK(kiln_vocab_create(f, &vocab));
        CHECK_OK(kiln_grammar_vocab_create(vocab, NULL, 0, &gv));
        CHECK_EQ_INT(kiln_grammar_vocab_n_tokens(gv), kiln_vocab_n_tokens(vocab));
        check_mask_against_per_token(json, gv, vocab, "");
        check_mask_against_per_token(json, gv, vocab, "{\"na");
        check_mask_against_per_token(json, gv, vocab, "{\"a\": [1, 2");
        check_mask_against_per_token(json, gv, vocab, "{\"a\": {}}");
        check_mask_against_per_token(utf, gv, vocab, "\xC3");
        check_mask_against_per_token(utf, gv, vocab, "\xC3\xA9t\xC3\xA9 \xE4");
        check_mask_against_per_token(utf, gv, vocab, "\xC3\xA9t\xC3\xA9 \xE4\xB8\x80");
        kiln_grammar_vocab_destroy(gv);
        kiln_vocab_destroy(vocab);
        kiln_gguf_close(f);
    }
    kiln_grammar_destroy(json);
    kiln_grammar_destroy(utf);
}

/* Whether token t may follow the tokens prev[0..n): the reference matcher ref, reset, accepts them all. */
static bool allowed_after(kiln_grammar_matcher *ref, const int32_t *prev, int n, int32_t t) {
    bool ok = kiln_grammar_matcher_reset(ref) == KILN_OK;
    for (int i = 0; ok && i < n; i++)
        ok = kiln_grammar_matcher_accept(ref, prev[i]) == KILN_OK;
    return ok && kiln_grammar_matcher_accept(ref, t) == KILN_OK;
}

/* Greedy picks the highest logit among the allowed tokens; sampling at temperature 1 draws only allowed
 * ones; and the sampler advances the matcher, so the text stays a prefix of a sentence to the end. */
static void the_sampler_draws_only_what_the_grammar_allows(void) {
    kiln_gguf *f = NULL;
    kiln_vocab *vocab = NULL;
    kiln_grammar_vocab *gv = NULL;
    kiln_grammar *g;
    free(read_grammar("json.gbnf", &g));
    CHECK_OK(kiln_gguf_open(harness_data_path("vocab/ggml-vocab-llama-spm.gguf"), &f));
    CHECK_OK(kiln_vocab_create(f, &vocab));
    CHECK_OK(kiln_grammar_vocab_create(vocab, NULL, 0, &gv));
    int32_t n = kiln_vocab_n_tokens(vocab);
    float *logits = malloc((size_t)n * sizeof *logits);
    uint64_t x = 88172645463325252ull;
    for (int greedy = 0; greedy < 2 && logits; greedy++) {
        kiln_sampler_params p = kiln_sampler_params_default();
        p.temperature = greedy ? 0.0f : 1.0f;
        p.seed = 9;
        kiln_sampler *s = NULL;
        kiln_grammar_matcher *m = NULL, *ref = NULL;
        CHECK_OK(kiln_sampler_create(n, &p, &s));
        CHECK_OK(kiln_grammar_matcher_create(g, gv, &m));
        CHECK_OK(kiln_grammar_matcher_create(g, gv, &ref));
        CHECK_OK(kiln_sampler_set_grammar(s, m));
        int32_t prev[24];
        int steps = greedy ? 5 : 24; /* the greedy reference tries every token of the vocabulary */
        for (int step = 0; step < steps && s && m && ref; step++) {
            for (int32_t i = 0; i < n; i++) { /* xorshift logits in [-8, 8) */
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                logits[i] = (float)((x >> 40) % 16000) / 1000.0f - 8.0f;
            }
            int32_t t = -1, best = -1;
            CHECK_OK(kiln_sampler_sample(s, logits, &t));
            CHECK(t >= 0 && allowed_after(ref, prev, step, t));
            for (int32_t c = 0; greedy && c < n; c++)
                if ((best < 0 || logits[c] > logits[best]) && allowed_after(ref, prev, step, c)) best = c;
            if (greedy) CHECK_EQ_INT(t, best);
            prev[step] = t;
            if (t == kiln_vocab_eos(vocab)) break;
        }
        kiln_grammar_matcher_destroy(m);
        kiln_grammar_matcher_destroy(ref);
        kiln_sampler_destroy(s);
    }
    free(logits);
    kiln_grammar_vocab_destroy(gv);
    kiln_vocab_destroy(vocab);
    kiln_gguf_close(f);
    kiln_grammar_destroy(g);
}

int main(void) {
    RUN(refuses_malformed_grammars_by_name);
    RUN(matches_literals_classes_and_repetitions);
    RUN(follows_rules_comments_and_empty_alternatives);
    RUN(runs_llama_cpp_style_grammar_files);
    RUN(carries_partial_utf8_between_pieces);
    RUN(refuses_runaway_ambiguity_by_name);
    RUN(nullable_references_in_a_row_expand_once);
    RUN(a_mask_past_its_work_bound_is_refused_by_name);
    RUN(masks_equal_per_token_matching);
    RUN(the_sampler_draws_only_what_the_grammar_allows);
    return harness_finish();
}
