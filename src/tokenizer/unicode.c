/*
 * unicode.c - lookups into the generated Unicode tables (see unicode.h) and strict UTF-8 decoding.
 *
 * Decoding accepts exactly the well-formed sequences of Unicode Table 3-7 (no overlongs, surrogates or
 * values above U+10FFFF); anything else is one invalid byte, so callers can keep it as a raw byte.
 */
#include "tokenizer/unicode.h"

/* Index of the last entry whose key (stride-spaced, shifted) is <= cp, or -1. */
static long bisect(const uint32_t *table, size_t n_entries, size_t stride, unsigned shift, uint32_t cp) {
    long lo = 0, hi = (long)n_entries - 1, found = -1;
    while (lo <= hi) {
        long mid = lo + (hi - lo) / 2;
        if ((table[(size_t)mid * stride] >> shift) <= cp) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

uint8_t kiln__uflags(uint32_t cp) {
    if (cp > 0x10FFFF) return KILN__UCLASS_OTHER;
    long i = bisect(kiln__ucat_ranges, kiln__ucat_ranges_len, 1, 4, cp);
    uint8_t flags = i < 0 ? KILN__UCLASS_OTHER : (uint8_t)(kiln__ucat_ranges[i] & KILN__UFLAG_CLASS);
    long w = bisect(kiln__uwhite_space, kiln__uwhite_space_len, 1, 0, cp);
    if (w >= 0 && kiln__uwhite_space[w] == cp) flags |= KILN__UFLAG_SPACE;
    return flags;
}

uint32_t kiln__ulower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    long i = bisect(kiln__ulower_pairs, kiln__ulower_pairs_len / 2, 2, 0, cp);
    return i >= 0 && kiln__ulower_pairs[2 * i] == cp ? kiln__ulower_pairs[2 * i + 1] : cp;
}

uint32_t kiln__unfd_first(uint32_t cp) {
    if (cp < 0xC0) return cp;
    long i = bisect(kiln__unfd_ranges, kiln__unfd_ranges_len / 3, 3, 0, cp);
    return i >= 0 && cp <= kiln__unfd_ranges[3 * i + 1] ? kiln__unfd_ranges[3 * i + 2] : cp;
}

bool kiln__udeepseek_letter(uint32_t cp) {
    long i = bisect(kiln__udeepseek_letters, kiln__udeepseek_letters_len / 2, 2, 0, cp);
    return i >= 0 && cp <= kiln__udeepseek_letters[2 * i + 1];
}

size_t kiln__utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    *cp = KILN__UINVALID;
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2, v = b & 0x1Fu;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3, v = b & 0x0Fu;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4, v = b & 0x07u;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return 1;
    }
    if (n < need) return 1;
    for (size_t k = 1; k < need; k++) {
        if (s[k] < lo || s[k] > hi) return 1;
        lo = 0x80, hi = 0xBF;
        v = (v << 6) | (s[k] & 0x3Fu);
    }
    *cp = v;
    return need;
}

size_t kiln__utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
