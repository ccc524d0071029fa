/*
 * bigram_heap.h - the priority queue of candidate merges shared by the SentencePiece and BPE tokenizers:
 * a binary heap of adjacent symbol pairs, highest priority first, ties to the leftmost pair. SentencePiece
 * uses the merged token's score as the priority, BPE the negated merge rank (exact in a float for the
 * < 2^24 merges a vocabulary can have).
 */
#ifndef KILN_TOKENIZER_BIGRAM_HEAP_H
#define KILN_TOKENIZER_BIGRAM_HEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct kiln__bigram {
    int32_t left, right; /* symbol indexes */
    float priority;      /* higher pops first */
    uint32_t size;       /* left.n + right.n when pushed: a stale entry no longer matches */
} kiln__bigram;

typedef struct kiln__bigram_heap {
    kiln__bigram *items; /* capacity owned by the caller */
    size_t len;
} kiln__bigram_heap;

void kiln__bigram_push(kiln__bigram_heap *h, kiln__bigram b);
/* The top entry; h->len must be > 0. */
kiln__bigram kiln__bigram_pop(kiln__bigram_heap *h);

#endif
