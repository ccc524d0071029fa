/*
 * fuzz_chat.c - libFuzzer target for the chat templates (src/chat/template.c): recognizing a template text
 * and rendering arbitrary conversations with every template.
 *
 * Input layout: byte 0 chooses the template (low 3 bits: chatml, llama3, phi3, mistral, plain, or 5..7:
 * the template recognized from the first part, which may be refused) and whether the generation prompt is
 * added (bit 3). The rest is split at 0xFF bytes into parts; after the template part, each part is one
 * message whose first byte picks the role (system, user, assistant, or the rest of the part up to ':' as an
 * arbitrary role string) and whose remaining bytes are the content (arbitrary bytes, NUL ends them early as
 * a C string would). Checks:
 *   - recognizing never fails but with KILN_E_UNSUPPORTED and a message, and a recognized template's
 *     markers occur in the text;
 *   - rendering either fails with KILN_E_INVALID_ARG and a message (a bad role, a late system message) or
 *     reports its length, and rendering into exactly that many bytes plus the terminator gives the same
 *     length and a NUL at its end; every message's content occurs in the text;
 *   - a smaller buffer fails with KILN_E_RANGE, holds a NUL-terminated prefix of the full text, and still
 *     reports the full length;
 *   - prefix stability: when the last message is the user's, the rendering with the generation prompt is a
 *     prefix of the rendering with an assistant reply appended.
 * Seeds: corpus/chat; dictionary chat.dict.
 */
#include "kiln.h"

#include <stdlib.h>
#include <string.h>

#define MAX_MSGS 64

static const char *const names[5] = {"chatml", "llama3", "phi3", "mistral", "plain"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool contains(const char *hay, size_t n, const char *needle) {
    size_t k = strlen(needle);
    return k == 0 || memmem(hay, n, needle, k) != NULL;
}

/* Renders msgs, checks the length contracts, and returns the malloc'd text (NULL when refused). */
static char *render(const kiln_chat_template *t, const kiln_chat_message *msgs, size_t n, bool gen,
                    size_t cut, size_t *len) {
    kiln_status st = kiln_chat_render(t, msgs, n, gen, NULL, 0, len);
    if (st == KILN_E_INVALID_ARG) {
        if (kiln_last_error()[0] == '\0') __builtin_trap();
        return NULL;
    }
    if (st != KILN_E_RANGE) __builtin_trap(); /* a NULL buffer cannot hold the terminator */
    char *buf = malloc(*len + 1);
    size_t again = 0;
    if (!buf) return NULL;
    if (kiln_chat_render(t, msgs, n, gen, buf, *len + 1, &again) != KILN_OK || again != *len ||
        buf[*len] != '\0')
        __builtin_trap();
    /* Mistral's system text leads the first user message after it; with none, it has no place (as in
     * llama.cpp's rendering), so only the other messages must appear. */
    bool user_after = false;
    for (size_t i = n; i-- > 0;) {
        bool dropped = t == kiln_chat_template_by_name("mistral") && !user_after;
        if (!dropped || strcmp(msgs[i].role, "system") != 0)
            if (!contains(buf, *len, msgs[i].content)) __builtin_trap();
        user_after = user_after || strcmp(msgs[i].role, "user") == 0;
    }
    /* A buffer cut short holds a prefix of the text. */
    size_t cap = cut % (*len + 1);
    char *small = malloc(cap + 1);
    if (small) {
        memset(small, 0x55, cap + 1);
        if (kiln_chat_render(t, msgs, n, gen, small, cap, &again) != (cap > *len ? KILN_OK : KILN_E_RANGE) ||
            again != *len)
            __builtin_trap();
        if (cap > 0 && (small[cap - 1] != '\0' || memcmp(small, buf, cap - 1) != 0)) __builtin_trap();
        if (small[cap] != 0x55) __builtin_trap(); /* nothing written past cap */
        free(small);
    }
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_chat_message msgs[MAX_MSGS + 1];
    char *parts[MAX_MSGS + 1];
    size_t n_parts = 0, n = 0, len = 0, len2 = 0;
    const kiln_chat_template *t = NULL;
    if (size == 0) return 0;
    unsigned pick = data[0] & 7;
    bool gen = (data[0] & 8) != 0;
    /* Split the rest at 0xFF into NUL-terminated copies. */
    for (size_t at = 1; at <= size && n_parts < MAX_MSGS;) {
        const uint8_t *end = memchr(data + at, 0xFF, size - at);
        size_t k = end ? (size_t)(end - (data + at)) : size - at;
        parts[n_parts] = malloc(k + 1);
        if (!parts[n_parts]) break;
        memcpy(parts[n_parts], data + at, k);
        parts[n_parts++][k] = '\0';
        at += k + 1;
    }
    size_t first = 0;
    if (pick < 5) {
        t = kiln_chat_template_by_name(names[pick]);
    } else if (n_parts > 0) {
        size_t k = strlen(parts[0]); /* the part's bytes up to its first NUL */
        first = 1;
        kiln_status st = kiln_chat_template_recognize(parts[0], k, &t);
        if (st == KILN_OK) {
            if (!t || !kiln_chat_template_by_name(kiln_chat_template_name(t))) __builtin_trap();
        } else if (st != KILN_E_UNSUPPORTED || t != NULL || kiln_last_error()[0] == '\0') {
            __builtin_trap();
        }
    }
    if (!t) goto done;
    for (size_t i = first; i < n_parts; i++) {
        char *p = parts[i];
        char *content = p[0] ? p + 1 : p;
        switch (p[0] % 4) {
        case 0: msgs[n].role = "system"; break;
        case 1: msgs[n].role = "user"; break;
        case 2: msgs[n].role = "assistant"; break;
        default: { /* an arbitrary role string: the bytes up to ':' */
            char *colon = strchr(p + 1, ':');
            msgs[n].role = p + 1;
            content = colon ? colon + 1 : p + strlen(p);
            if (colon) *colon = '\0';
        }
        }
        msgs[n++].content = content;
    }
    char *text = render(t, msgs, n, gen, size, &len);
    if (text && n > 0 && strcmp(msgs[n - 1].role, "user") == 0) {
        /* Prefix stability: the generation prompt opens what the reply's rendering continues. */
        char *prompt = gen ? text : render(t, msgs, n, true, size, &len2);
        size_t plen = gen ? len : len2;
        msgs[n].role = "assistant";
        msgs[n].content = n_parts > first ? parts[n_parts - 1] : "";
        char *full = render(t, msgs, n + 1, false, size / 2, &len2);
        if (!prompt || !full || len2 < plen || memcmp(prompt, full, plen) != 0) __builtin_trap();
        if (prompt != text) free(prompt);
        free(full);
    }
    free(text);
done:
    for (size_t i = 0; i < n_parts; i++)
        free(parts[i]);
    return 0;
}
