/*
 * state.c - one sequence's KV state written out and read back (kiln_ctx_state_save/load to a file,
 * kiln_ctx_state_get/set to memory): its cells' positions, their K and V rows in every layer, and the
 * token history the caller keeps beside them.
 *
 * The format (little-endian; docs/runtime.md has the table): a 64-byte header (magic "KILNKVST", version,
 * cache type, the model's identity, L, Hkv, D, the cell and token counts, the bytes of one cache row and
 * of the payload), then the payload (the tokens, the positions in increasing order, and per layer the K
 * rows then the V rows of the cells in that order), then a 64-bit FNV-1a checksum of every byte before
 * it. The model's identity is a hash of its architecture, hyperparameters and tensor table (names, types,
 * shapes, offsets; not the weights), so a state only goes back into the model that made it.
 *
 * Reading validates as the GGUF reader does: every field through a bounded reader, every count against
 * the context and the limits, sizes with overflow-checked arithmetic, the whole length against the
 * source's before anything is allocated, positions strictly increasing, tokens inside the vocabulary, the
 * checksum last. Rows are written into free cells while they are read, and the cells are taken (and the
 * sequence's old cells dropped) only once everything checked out, so a failed load changes nothing.
 * Cache rows move through the buffer verbs under the engine lock: a device-resident cache is never
 * dereferenced.
 */
#include "runtime/context.h"

#include "core/core.h"
#include "tensor/types.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_MAGIC "KILNKVST"
#define STATE_VERSION 1u
#define HEADER_BYTES 64u
#define TRAILER_BYTES 8u
#define FNV_START 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
#define STAGE_BYTES ((size_t)1 << 20) /* rows move through a staging buffer of this size (at least a row) */

typedef struct state_header {
    uint32_t version, kv_type;
    uint64_t model_id;
    uint32_t n_layer, n_head_kv, head_dim, n_cells, n_tokens, reserved;
    uint64_t row_bytes, payload_bytes;
} state_header;

/* A byte source or sink: a FILE, or a memory block of known size. Every byte that passes is hashed. */
typedef struct state_io {
    FILE *f;
    uint8_t *mem;       /* sink */
    const uint8_t *src; /* source */
    size_t size, pos;
    uint64_t hash;
} state_io;

static void fnv(uint64_t *h, const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t x = *h;
    for (size_t i = 0; i < n; i++)
        x = (x ^ p[i]) * FNV_PRIME;
    *h = x;
}

static kiln_status io_put(state_io *io, const void *data, size_t n) {
    fnv(&io->hash, data, n);
    if (io->f) {
        if (fwrite(data, 1, n, io->f) != n)
            return kiln__error(KILN_E_IO, "writing the KV state: %s", strerror(errno));
    } else {
        if (n > io->size - io->pos)
            return kiln__error(KILN_E_INTERNAL, "the KV state outgrew its computed size");
        memcpy(io->mem + io->pos, data, n);
    }
    io->pos += n;
    return KILN_OK;
}

/* n bytes, or a named truncation (the length was checked up front, so this is a file that shrank). */
static kiln_status io_take(state_io *io, void *dst, size_t n, const char *what) {
    if (n > io->size - io->pos)
        return kiln__error(KILN_E_FORMAT,
                           "truncated KV state: %s at byte offset %zu needs %zu bytes, %zu remain", what,
                           io->pos, n, io->size - io->pos);
    if (io->f) {
        if (fread(dst, 1, n, io->f) != n)
            return kiln__error(KILN_E_FORMAT, "truncated KV state: %s at byte offset %zu: the file ended",
                               what, io->pos);
    } else {
        memcpy(dst, io->src + io->pos, n);
    }
    fnv(&io->hash, dst, n);
    io->pos += n;
    return KILN_OK;
}

static void le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) {
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static void hash_u64(uint64_t *h, uint64_t v) {
    uint8_t b[8];
    le64(b, v);
    fnv(h, b, 8);
}

/* The model's identity: its architecture, hyperparameters and tensor table, never its weights' bytes. */
static uint64_t model_identity(const kiln_model *m) {
    const kiln_hparams *hp = &m->hp;
    const kiln_gguf *g = m->gguf;
    uint64_t h = FNV_START;
    int64_t n = kiln_gguf_tensor_count(g);
    const int64_t fields[] = {hp->n_ctx_train, hp->n_embd,       hp->n_layer, hp->n_ff,    hp->n_head,
                              hp->n_head_kv,   hp->head_dim,     hp->n_rot,   hp->n_vocab, hp->rope_mode,
                              hp->n_swa,       hp->rope_scaling, hp->causal,  hp->pooling, hp->rope_orig_ctx,
                              m->norm,         m->norm_order,    m->ffn};
    const float reals[] = {hp->rope_freq_base, hp->rope_freq_scale, hp->norm_eps,
                           hp->rope_factor,    hp->rope_low_freq,   hp->rope_high_freq};
    fnv(&h, m->arch, strlen(m->arch) + 1);
    for (size_t i = 0; i < KILN__ARRAY_LEN(fields); i++)
        hash_u64(&h, (uint64_t)fields[i]);
    for (size_t i = 0; i < KILN__ARRAY_LEN(reals); i++) {
        uint32_t bits;
        memcpy(&bits, &reals[i], sizeof bits);
        hash_u64(&h, bits);
    }
    hash_u64(&h, (uint64_t)n);
    for (int64_t i = 0; i < n; i++) {
        kiln_tensor_info t;
        if (kiln_gguf_tensor_info(g, i, &t)) continue;
        fnv(&h, t.name, strlen(t.name) + 1);
        hash_u64(&h, (uint64_t)t.type);
        hash_u64(&h, (uint64_t)t.n_dims);
        for (int d = 0; d < 4; d++)
            hash_u64(&h, (uint64_t)t.ne[d]);
        hash_u64(&h, t.offset);
    }
    return h;
}

/* 4 n_tokens + 4 n_cells + 2 L n_cells row_bytes, or overflow. */
static bool payload_size(uint64_t n_tokens, uint64_t n_cells, uint64_t n_layer, uint64_t row_bytes,
                         uint64_t *out) {
    uint64_t rows, ids;
    return kiln__mul_overflow_u64(n_cells, 2 * n_layer, &rows) ||
           kiln__mul_overflow_u64(rows, row_bytes, &rows) ||
           kiln__add_overflow_u64(n_tokens, n_cells, &ids) || kiln__mul_overflow_u64(ids, 4, &ids) ||
           kiln__add_overflow_u64(ids, rows, out);
}

static kiln_status check_ctx(const kiln_ctx *c, int32_t seq, const char *fn) {
    if (!c) return kiln__error(KILN_E_INVALID_ARG, "%s: NULL context", fn);
    if (c->embeddings)
        return kiln__error(KILN_E_INVALID_ARG, "%s: an embeddings context keeps no KV state between batches",
                           fn);
    if (seq < 0 || seq >= c->n_seq_max)
        return kiln__error(KILN_E_INVALID_ARG, "%s: sequence id %d is outside 0..%d", fn, seq,
                           c->n_seq_max - 1);
    return KILN_OK;
}

typedef struct cell_ref {
    int32_t pos, cell;
} cell_ref;

static int by_pos(const void *a, const void *b) {
    const cell_ref *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* The cells of seq in increasing position order (NULL with *n = 0 when it has none). */
static kiln_status seq_cells(const kiln_ctx *c, int32_t seq, cell_ref **out, int32_t *n) {
    uint64_t bit = (uint64_t)1 << seq;
    int32_t k = 0;
    *out = NULL;
    *n = 0;
    for (int32_t i = 0; i < c->cells.n_cells; i++)
        k += (c->cells.seqs[i] & bit) != 0;
    if (k == 0) return KILN_OK;
    if (!(*out = kiln__alloc_array((size_t)k, sizeof **out))) return kiln__nomem("the KV state's cell list");
    k = 0;
    for (int32_t i = 0; i < c->cells.n_cells; i++)
        if (c->cells.seqs[i] & bit) (*out)[k++] = (cell_ref){c->cells.pos[i], i};
    qsort(*out, (size_t)k, sizeof **out, by_pos);
    *n = k;
    return KILN_OK;
}

static size_t row_offset(const kiln_ctx *c, int32_t layer, int32_t v, int32_t cell) {
    return (((size_t)layer * 2 + (size_t)v) * (size_t)c->n_ctx + (size_t)cell) * c->kv_row_bytes;
}

/* The run of cells from refs[i] on whose indices are consecutive, at most max rows. */
static int32_t run_length(const cell_ref *refs, int32_t i, int32_t n, int32_t max) {
    int32_t k = 1;
    while (i + k < n && k < max && refs[i + k].cell == refs[i].cell + k)
        k++;
    return k;
}

/* Every layer's K then V rows of the listed cells, from the cache to io (save) or from io into the
 * cache (load). Runs of adjacent cells move in one buffer call. Called with the engine lock held. */
static kiln_status move_rows(kiln_ctx *c, const cell_ref *refs, int32_t n, state_io *io, bool load) {
    size_t rb = c->kv_row_bytes, cap_rows = KILN__MAX(STAGE_BYTES / rb, 1);
    uint8_t *stage = kiln__alloc_array(KILN__MIN(cap_rows, (size_t)n), rb);
    kiln_status s = KILN_OK;
    if (!stage) return kiln__nomem("the KV state's staging buffer");
    for (int32_t l = 0; l < c->model->hp.n_layer && !s; l++)
        for (int32_t v = 0; v < 2 && !s; v++)
            for (int32_t i = 0; i < n && !s;) {
                int32_t k = run_length(refs, i, n, (int32_t)KILN__MIN(cap_rows, (size_t)INT32_MAX));
                size_t off = row_offset(c, l, v, refs[i].cell), bytes = (size_t)k * rb;
                if (load) {
                    if (!(s = io_take(io, stage, bytes, v ? "V rows" : "K rows")))
                        s = kiln__buffer_set(&c->kv, off, stage, bytes);
                } else if (!(s = kiln__buffer_get(&c->kv, off, stage, bytes))) {
                    s = io_put(io, stage, bytes);
                }
                i += k;
            }
    kiln__dealloc(stage);
    return s;
}

static void header_encode(const state_header *h, uint8_t *b) {
    memcpy(b, STATE_MAGIC, 8);
    le32(b + 8, h->version);
    le32(b + 12, h->kv_type);
    le64(b + 16, h->model_id);
    le32(b + 24, h->n_layer);
    le32(b + 28, h->n_head_kv);
    le32(b + 32, h->head_dim);
    le32(b + 36, h->n_cells);
    le32(b + 40, h->n_tokens);
    le32(b + 44, h->reserved);
    le64(b + 48, h->row_bytes);
    le64(b + 56, h->payload_bytes);
}

static void header_decode(const uint8_t *b, state_header *h) {
    h->version = rd32(b + 8);
    h->kv_type = rd32(b + 12);
    h->model_id = rd64(b + 16);
    h->n_layer = rd32(b + 24);
    h->n_head_kv = rd32(b + 28);
    h->head_dim = rd32(b + 32);
    h->n_cells = rd32(b + 36);
    h->n_tokens = rd32(b + 40);
    h->reserved = rd32(b + 44);
    h->row_bytes = rd64(b + 48);
    h->payload_bytes = rd64(b + 56);
}

/* The header this context would write for n_cells cells and n_tokens tokens. */
static kiln_status header_make(const kiln_ctx *c, int32_t n_cells, int32_t n_tokens, state_header *h,
                               uint64_t *total) {
    const kiln_hparams *hp = &c->model->hp;
    memset(h, 0, sizeof *h);
    h->version = STATE_VERSION;
    h->kv_type = (uint32_t)c->kv_type;
    h->model_id = model_identity(c->model);
    h->n_layer = (uint32_t)hp->n_layer;
    h->n_head_kv = (uint32_t)hp->n_head_kv;
    h->head_dim = (uint32_t)hp->head_dim;
    h->n_cells = (uint32_t)n_cells;
    h->n_tokens = (uint32_t)n_tokens;
    h->row_bytes = c->kv_row_bytes;
    if (payload_size((uint64_t)n_tokens, (uint64_t)n_cells, h->n_layer, h->row_bytes, &h->payload_bytes) ||
        kiln__add_overflow_u64(h->payload_bytes, HEADER_BYTES + TRAILER_BYTES, total) || *total > SIZE_MAX)
        return kiln__error(KILN_E_RANGE, "a KV state of %d cells overflows", n_cells);
    return KILN_OK;
}

static kiln_status check_tokens_arg(const int32_t *tokens, int32_t n_tokens, const char *fn) {
    if (n_tokens < 0 || n_tokens > KILN_MAX_CTX || (n_tokens > 0 && !tokens))
        return kiln__error(KILN_E_INVALID_ARG,
                           "%s: %d history tokens (0..KILN_MAX_CTX, with an array when > 0)", fn, n_tokens);
    return KILN_OK;
}

/* Header, tokens, positions, rows, checksum. */
static kiln_status write_state(kiln_ctx *c, int32_t seq, const int32_t *tokens, int32_t n_tokens,
                               state_io *io, const char *fn) {
    cell_ref *refs = NULL;
    int32_t n = 0;
    uint64_t total = 0;
    state_header h;
    uint8_t b[HEADER_BYTES];
    kiln_status s;
    if ((s = check_tokens_arg(tokens, n_tokens, fn)) || (s = seq_cells(c, seq, &refs, &n))) return s;
    if ((s = header_make(c, n, n_tokens, &h, &total))) goto done;
    if (!io->f && total != io->size) {
        s = kiln__error(KILN_E_RANGE, "%s: the state of sequence %d takes %llu bytes, the buffer has %zu", fn,
                        seq, (unsigned long long)total, io->size);
        goto done;
    }
    io->hash = FNV_START;
    header_encode(&h, b);
    if ((s = io_put(io, b, HEADER_BYTES))) goto done;
    for (int32_t i = 0; i < n_tokens && !s; i++) {
        le32(b, (uint32_t)tokens[i]);
        s = io_put(io, b, 4);
    }
    for (int32_t i = 0; i < n && !s; i++) {
        le32(b, (uint32_t)refs[i].pos);
        s = io_put(io, b, 4);
    }
    if (s) goto done;
    pthread_mutex_lock(&c->engine->lock);
    s = move_rows(c, refs, n, io, false);
    pthread_mutex_unlock(&c->engine->lock);
    if (!s) {
        le64(b, io->hash);
        s = io_put(io, b, TRAILER_BYTES);
    }
done:
    kiln__dealloc(refs);
    return s;
}

/* The header against this context: each field that must match, by name. */
static kiln_status check_header(const kiln_ctx *c, const uint8_t *b, const state_header *h, uint64_t size,
                                int32_t capacity) {
    state_header want;
    uint64_t payload = 0, total = 0;
    const kiln_hparams *hp = &c->model->hp;
    if (memcmp(b, STATE_MAGIC, 8) != 0) return kiln__error(KILN_E_FORMAT, "not a Kiln KV state: bad magic");
    if (h->version != STATE_VERSION)
        return kiln__error(KILN_E_UNSUPPORTED, "KV state version %u; this Kiln reads version %u", h->version,
                           STATE_VERSION);
    if (h->reserved != 0)
        return kiln__error(KILN_E_FORMAT, "KV state: reserved field is %u, not 0", h->reserved);
    if (header_make(c, 0, 0, &want, &total)) return KILN_E_RANGE;
    if (h->model_id != want.model_id)
        return kiln__error(KILN_E_INVALID_ARG,
                           "KV state: saved from another model (identity %016llx, this "
                           "model's is %016llx)",
                           (unsigned long long)h->model_id, (unsigned long long)want.model_id);
    if (h->kv_type != want.kv_type)
        return kiln__error(KILN_E_INVALID_ARG, "KV state: cache type %s (%u), this context's cache is %s",
                           kiln__type_name((kiln_type)h->kv_type), h->kv_type, kiln__type_name(c->kv_type));
    if (h->n_layer != want.n_layer || h->n_head_kv != want.n_head_kv || h->head_dim != want.head_dim ||
        h->row_bytes != want.row_bytes)
        return kiln__error(KILN_E_FORMAT,
                           "KV state: shape %u layers x %u heads x %u (rows of %llu bytes) "
                           "disagrees with the model's %d x %d x %d (%zu bytes)",
                           h->n_layer, h->n_head_kv, h->head_dim, (unsigned long long)h->row_bytes,
                           hp->n_layer, hp->n_head_kv, hp->head_dim, c->kv_row_bytes);
    if (h->n_tokens > KILN_MAX_CTX)
        return kiln__error(KILN_E_FORMAT, "KV state: %u history tokens exceed KILN_MAX_CTX (%d)", h->n_tokens,
                           KILN_MAX_CTX);
    if (payload_size(h->n_tokens, h->n_cells, h->n_layer, h->row_bytes, &payload) ||
        payload != h->payload_bytes)
        return kiln__error(KILN_E_FORMAT, "KV state: payload size %llu disagrees with %u tokens and %u cells",
                           (unsigned long long)h->payload_bytes, h->n_tokens, h->n_cells);
    if (payload + HEADER_BYTES + TRAILER_BYTES != size)
        return kiln__error(KILN_E_FORMAT,
                           "KV state: %llu bytes, the header describes %llu (truncated or "
                           "trailing bytes)",
                           (unsigned long long)size,
                           (unsigned long long)(payload + HEADER_BYTES + TRAILER_BYTES));
    if ((int64_t)h->n_cells > (int64_t)(c->cells.n_cells - c->cells.n_used))
        return kiln__error(KILN_E_CONTEXT_FULL,
                           "KV state: %u cells do not fit: %d of %d are free (clear the "
                           "sequence first)",
                           h->n_cells, c->cells.n_cells - c->cells.n_used, c->cells.n_cells);
    if ((int64_t)h->n_tokens > (int64_t)capacity)
        return kiln__error(KILN_E_RANGE, "KV state: %u history tokens, the caller's array holds %d",
                           h->n_tokens, capacity);
    return KILN_OK;
}

/* Tokens inside the vocabulary; positions increasing, each usable by the model. */
static kiln_status read_ids(const kiln_ctx *c, state_io *io, int32_t *ids, int32_t n, bool positions) {
    uint8_t b[4];
    kiln_status s;
    const kiln_hparams *hp = &c->model->hp;
    int32_t lim = positions ? (kiln__has(&c->model->pos_embd) ? hp->n_ctx_train : INT32_MAX) : hp->n_vocab;
    for (int32_t i = 0; i < n; i++) {
        if ((s = io_take(io, b, 4, positions ? "position" : "token"))) return s;
        ids[i] = (int32_t)rd32(b);
        if (ids[i] < 0 || ids[i] >= lim)
            return kiln__error(KILN_E_FORMAT, "KV state: %s %d at index %d is outside 0..%d",
                               positions ? "position" : "token", ids[i], i, lim - 1);
        if (positions && i > 0 && ids[i] <= ids[i - 1])
            return kiln__error(KILN_E_FORMAT, "KV state: position %d at index %d does not follow %d", ids[i],
                               i, ids[i - 1]);
    }
    return KILN_OK;
}

static kiln_status read_state(kiln_ctx *c, int32_t seq, state_io *io, int32_t *tokens, int32_t capacity,
                              int32_t *n_tokens) {
    uint8_t b[HEADER_BYTES];
    state_header h;
    int32_t *ids = NULL, *pos = NULL, *cells = NULL, *seqv = NULL;
    cell_ref *refs = NULL;
    uint64_t sum;
    kiln_status s;
    if (io->size < HEADER_BYTES + TRAILER_BYTES)
        return kiln__error(KILN_E_FORMAT, "truncated KV state: %zu bytes, the header alone takes %u",
                           io->size, HEADER_BYTES + TRAILER_BYTES);
    io->hash = FNV_START;
    if ((s = io_take(io, b, HEADER_BYTES, "header"))) return s;
    header_decode(b, &h);
    if ((s = check_header(c, b, &h, io->size, capacity))) return s;
    /* Every count below is bounded by the source's length, checked against the header. */
    ids = kiln__alloc_array((size_t)h.n_tokens + 1, sizeof *ids);
    pos = kiln__alloc_array((size_t)h.n_cells + 1, sizeof *pos);
    cells = kiln__alloc_array((size_t)h.n_cells + 1, sizeof *cells);
    seqv = kiln__alloc_array((size_t)h.n_cells + 1, sizeof *seqv);
    refs = kiln__alloc_array((size_t)h.n_cells + 1, sizeof *refs);
    if (!ids || !pos || !cells || !seqv || !refs) {
        s = kiln__nomem("reading a KV state");
        goto done;
    }
    if ((s = read_ids(c, io, ids, (int32_t)h.n_tokens, false)) ||
        (s = read_ids(c, io, pos, (int32_t)h.n_cells, true)) ||
        (s = kiln__kv_find(&c->cells, (int32_t)h.n_cells, cells)))
        goto done;
    for (uint32_t i = 0; i < h.n_cells; i++) {
        refs[i] = (cell_ref){pos[i], cells[i]};
        seqv[i] = seq;
    }
    pthread_mutex_lock(&c->engine->lock);
    s = move_rows(c, refs, (int32_t)h.n_cells, io, true);
    pthread_mutex_unlock(&c->engine->lock);
    if (s) goto done;
    sum = io->hash;
    if ((s = io_take(io, b, TRAILER_BYTES, "checksum"))) goto done;
    if (rd64(b) != sum) {
        s = kiln__error(KILN_E_FORMAT, "KV state: checksum %016llx, the contents hash to %016llx (corrupt)",
                        (unsigned long long)rd64(b), (unsigned long long)sum);
        goto done;
    }
    kiln__kv_seq_rm(&c->cells, seq, 0, INT32_MAX);
    kiln__kv_occupy(&c->cells, cells, pos, seqv, (int32_t)h.n_cells);
    if (h.n_tokens) memcpy(tokens, ids, (size_t)h.n_tokens * sizeof *ids);
    *n_tokens = (int32_t)h.n_tokens;
done:
    kiln__dealloc(ids);
    kiln__dealloc(pos);
    kiln__dealloc(cells);
    kiln__dealloc(seqv);
    kiln__dealloc(refs);
    return s;
}

kiln_status kiln_ctx_state_size(kiln_ctx *c, int32_t seq, int32_t n_tokens, size_t *out) {
    state_header h;
    uint64_t total = 0;
    cell_ref *refs = NULL;
    int32_t n;
    kiln_status s;
    if ((s = check_ctx(c, seq, "kiln_ctx_state_size"))) return s;
    if (!out || n_tokens < 0 || n_tokens > KILN_MAX_CTX)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_state_size: NULL out or %d tokens", n_tokens);
    if ((s = seq_cells(c, seq, &refs, &n))) return s;
    kiln__dealloc(refs);
    if ((s = header_make(c, n, n_tokens, &h, &total))) return s;
    *out = (size_t)total;
    return KILN_OK;
}

kiln_status kiln_ctx_state_get(kiln_ctx *c, int32_t seq, const int32_t *tokens, int32_t n_tokens, void *dst,
                               size_t size) {
    state_io io = {0};
    kiln_status s;
    if ((s = check_ctx(c, seq, "kiln_ctx_state_get"))) return s;
    if (!dst) return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_state_get: NULL buffer");
    io.mem = dst;
    io.size = size;
    return write_state(c, seq, tokens, n_tokens, &io, "kiln_ctx_state_get");
}

kiln_status kiln_ctx_state_set(kiln_ctx *c, int32_t seq, const void *src, size_t size, int32_t *tokens,
                               int32_t capacity, int32_t *n_tokens) {
    state_io io = {0};
    kiln_status s;
    if ((s = check_ctx(c, seq, "kiln_ctx_state_set"))) return s;
    if (!src || !n_tokens || capacity < 0 || (capacity > 0 && !tokens))
        return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_state_set: NULL argument or capacity %d", capacity);
    io.src = src;
    io.size = size;
    return read_state(c, seq, &io, tokens, capacity, n_tokens);
}

kiln_status kiln_ctx_state_save(kiln_ctx *c, const char *path, int32_t seq, const int32_t *tokens,
                                int32_t n_tokens) {
    state_io io = {0};
    char *tmp;
    size_t len;
    kiln_status s;
    if ((s = check_ctx(c, seq, "kiln_ctx_state_save"))) return s;
    if (!path || !*path) return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_state_save: no path");
    /* Written beside the target and renamed over it, so a failed save leaves an earlier file whole. */
    len = strlen(path);
    if (!(tmp = kiln__alloc(len + 5))) return kiln__nomem("the KV state's file name");
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    if (!(io.f = fopen(tmp, "wb"))) {
        s = kiln__error(KILN_E_IO, "cannot create '%s': %s", tmp, strerror(errno));
        kiln__dealloc(tmp);
        return s;
    }
    s = write_state(c, seq, tokens, n_tokens, &io, "kiln_ctx_state_save");
    if (fclose(io.f) != 0 && !s) s = kiln__error(KILN_E_IO, "writing '%s': %s", tmp, strerror(errno));
    if (!s && rename(tmp, path) != 0)
        s = kiln__error(KILN_E_IO, "renaming '%s' to '%s': %s", tmp, path, strerror(errno));
    if (s) remove(tmp);
    kiln__dealloc(tmp);
    return s;
}

kiln_status kiln_ctx_state_load(kiln_ctx *c, const char *path, int32_t seq, int32_t *tokens, int32_t capacity,
                                int32_t *n_tokens) {
    state_io io = {0};
    long end;
    kiln_status s;
    if ((s = check_ctx(c, seq, "kiln_ctx_state_load"))) return s;
    if (!path || !n_tokens || capacity < 0 || (capacity > 0 && !tokens))
        return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_state_load: NULL argument or capacity %d", capacity);
    if (!(io.f = fopen(path, "rb")))
        return kiln__error(KILN_E_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fseek(io.f, 0, SEEK_END) != 0 || (end = ftell(io.f)) < 0 || fseek(io.f, 0, SEEK_SET) != 0) {
        s = kiln__error(KILN_E_IO, "cannot size '%s': %s", path, strerror(errno));
    } else {
        io.size = (size_t)end;
        s = read_state(c, seq, &io, tokens, capacity, n_tokens);
    }
    fclose(io.f);
    return s ? kiln__error_prefix(s, "loading '%s': ", path) : KILN_OK;
}
