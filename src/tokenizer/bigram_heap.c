/* bigram_heap.c - see bigram_heap.h. */
#include "tokenizer/bigram_heap.h"

#include <stdbool.h>

static bool before(const kiln__bigram *a, const kiln__bigram *b) {
    return a->priority > b->priority || (a->priority == b->priority && a->left < b->left);
}

void kiln__bigram_push(kiln__bigram_heap *h, kiln__bigram b) {
    size_t i = h->len++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&b, &h->items[parent])) break;
        h->items[i] = h->items[parent];
        i = parent;
    }
    h->items[i] = b;
}

kiln__bigram kiln__bigram_pop(kiln__bigram_heap *h) {
    kiln__bigram top = h->items[0], last = h->items[--h->len];
    size_t i = 0, n = h->len;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && before(&h->items[child + 1], &h->items[child])) child++;
        if (!before(&h->items[child], &last)) break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (n > 0) h->items[i] = last;
    return top;
}
