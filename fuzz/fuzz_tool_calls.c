/*
 * fuzz_tool_calls.c - libFuzzer target for the tool-call parser of `kiln serve` (server/tools.h): a
 * model's reply is text the server did not write, and with tools in a request every reply goes through
 * ks_tool_calls_parse and, streamed, through ks_tool_calls_releasable.
 *
 * Byte 0 chooses the syntax (mod 3: Hermes from chatml, Llama 3.1 JSON from llama3, Mistral); the rest is
 * the reply (any bytes). Checks:
 *   - parsing gives 1 with at least one call, each with a name of 1..64 bytes without NUL and arguments
 *     that jansson reads back as an object, and content NULL or non-empty without surrounding
 *     whitespace; or 0 with nothing held (-1, out of memory, is a finding here);
 *   - what may be streamed of every prefix of the reply (of 64 evenly spaced ones beyond 128 bytes)
 *     never shrinks as the reply grows, never exceeds it, and never holds the syntax's marker;
 *   - the stream's way gives the same calls as the whole reply: parsing only the part held back (after
 *     what the whole reply releases) finds the same result and the same calls;
 *   - calls with OpenAI-style names written back in the syntax (ks_tool_call_format, ks_tool_calls_join),
 *     when their arguments hold no marker, parse back to the same calls.
 * Seeds: corpus/tool_calls; dictionary tool_calls.dict.
 */
#include "tools.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const templates[3] = {"chatml", "llama3", "mistral"};

static void check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_tool_calls: %s\n", what);
        abort();
    }
}

static bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

static void check_calls(const ks_tool_calls *c) {
    check(c->n >= 1 && c->calls, "a parse of 1 without calls");
    for (size_t i = 0; i < c->n; i++) {
        size_t n = strlen(c->calls[i].name);
        check(n >= 1 && n <= KS_TOOLS_MAX_NAME, "a call's name out of bounds");
        json_t *a = json_loads(c->calls[i].arguments, 0, NULL);
        check(json_is_object(a), "a call's arguments are not an object");
        json_decref(a);
    }
    if (c->content) {
        size_t n = c->content_len;
        check(n > 0 && !c->content[n] && !is_space(c->content[0]) && !is_space(c->content[n - 1]),
              "content not trimmed");
    } else {
        check(c->content_len == 0, "a length without content");
    }
}

static bool same_calls(const ks_tool_calls *a, const ks_tool_calls *b) {
    if (a->n != b->n) return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->calls[i].name, b->calls[i].name) || strcmp(a->calls[i].arguments, b->calls[i].arguments))
            return false;
    return true;
}

static bool openai_name(const char *s) {
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-'))
            return false;
    return true;
}

/* Write the calls back in the syntax and parse them again. */
static void round_trip(const ks_tool_syntax *sx, const ks_tool_calls *c) {
    char *calls[64];
    size_t n = c->n < 64 ? c->n : 64;
    for (size_t i = 0; i < n; i++) {
        const char *args = c->calls[i].arguments;
        if (!openai_name(c->calls[i].name) || strstr(args, "tool_call>") || strstr(args, "[TOOL_CALLS]") ||
            (sx->form == KS_TOOLS_LLAMA3 && n > 1))
            n = 0;
    }
    if (n == 0 || n != c->n) return;
    bool ok = true, bad = false;
    size_t made = 0;
    for (; ok && made < n; made++)
        ok = (calls[made] = ks_tool_call_format(sx, c->calls[made].name, c->calls[made].arguments, &bad)) != NULL;
    if (!ok) made--;
    check(ok && !bad, "writing a parsed call back failed");
    char *text = ks_tool_calls_join(sx, "", calls, n);
    check(text != NULL, "joining calls failed");
    ks_tool_calls again;
    check(ks_tool_calls_parse(sx, text, strlen(text), &again) == 1 && same_calls(c, &again),
          "calls written back do not parse to the same calls");
    ks_tool_calls_free(&again);
    free(text);
    for (size_t i = 0; i < made; i++)
        free(calls[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const ks_tool_syntax *sx = ks_tool_syntax_for(kiln_chat_template_by_name(templates[data[0] % 3]));
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    ks_tool_calls whole, tail;
    int r = ks_tool_calls_parse(sx, text, len, &whole);
    check(r == 0 || r == 1, "the parser failed");
    if (r == 1) check_calls(&whole);
    else check(whole.n == 0 && !whole.calls && !whole.content && !whole.content_len, "a parse of 0 holds something");
    size_t prev = 0, step = len <= 128 ? 1 : len / 64; /* every prefix of short replies, 64 of long */
    for (size_t k = 0;; k = k + step > len ? len : k + step) {
        size_t rel = ks_tool_calls_releasable(sx, text, k);
        check(rel <= k && rel >= prev, "the releasable prefix shrank or overran");
        check(!sx->marker || !memmem(text, rel, sx->marker, strlen(sx->marker)), "a marker was released");
        prev = rel;
        if (k == len) break;
    }
    int rt = ks_tool_calls_parse(sx, text + prev, len - prev, &tail);
    check(rt == r && (r != 1 || same_calls(&whole, &tail)), "the held-back part parses differently");
    if (r == 1) round_trip(sx, &whole);
    ks_tool_calls_free(&whole);
    ks_tool_calls_free(&tail);
    return 0;
}
