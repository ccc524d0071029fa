/*
 * kiln.h - the one public header of Kiln, a C11 inference engine for transformer language models.
 *
 * Conventions (see docs/architecture.md):
 *  - Every fallible call returns a kiln_status: KILN_OK (0) or a negative code. Results come back through
 *    out-parameters. On failure, kiln_last_error() returns a message, owned by the calling thread, that
 *    names what was wrong (the field, the values). The library never aborts or exits on bad input.
 *  - Handles are opaque. Whoever creates a handle destroys it; every _destroy/_close accepts NULL.
 *  - Parameter structs are public and filled by a kiln_*_default() constructor.
 *  - Borrowed pointers returned by the library say in their comment how long they stay valid.
 */
#ifndef KILN_H
#define KILN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_STRING "0.1.0"

/* ---------------------------------------------------------------------------------------------------
 * Status codes and errors
 * ------------------------------------------------------------------------------------------------- */

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_E_INVALID_ARG = -1,  /* a caller passed an invalid argument */
    KILN_E_NOMEM = -2,        /* an allocation failed */
    KILN_E_IO = -3,           /* open/read/write/mmap failed */
    KILN_E_FORMAT = -4,       /* a file or blob is malformed */
    KILN_E_UNSUPPORTED = -5,  /* well-formed, but not something Kiln can do (yet) */
    KILN_E_CONTEXT_FULL = -6, /* the request does not fit in the KV cache */
    KILN_E_NOT_FOUND = -7,    /* a key, tensor or file is absent */
    KILN_E_RANGE = -8,        /* a value or buffer size is out of range */
    KILN_E_INTERNAL = -9,     /* a bug in Kiln: please report it */
    KILN_E_ABORTED = -10,     /* the caller's abort callback stopped the call */
} kiln_status;

/* A short constant name such as "KILN_E_FORMAT". Never NULL. */
const char *kiln_status_name(kiln_status status);

/* The message of the most recent failing call on this thread ("" if none). Valid until the next Kiln
 * call on this thread. */
const char *kiln_last_error(void);

/* ---------------------------------------------------------------------------------------------------
 * Allocation. All of Kiln's heap memory goes through one replaceable allocator. Tests use it to count
 * allocations and to fail each one in turn. Not thread-safe to change while other Kiln calls run.
 * ------------------------------------------------------------------------------------------------- */

typedef struct kiln_allocator {
    void *(*alloc)(size_t size, void *user);
    void *(*realloc)(void *ptr, size_t size, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} kiln_allocator;

/* Install an allocator; NULL restores the libc one. */
void kiln_set_allocator(const kiln_allocator *allocator);

/* ---------------------------------------------------------------------------------------------------
 * Limits (the table with the reason for each is in docs/security.md). A GGUF file beyond a file limit is
 * refused with KILN_E_FORMAT, a vocabulary or context length beyond its limit with KILN_E_FORMAT when it
 * comes from the file and KILN_E_INVALID_ARG when a caller asks for it; each message names the limit.
 * Within them, opening a file allocates at most a small multiple of its size (docs/security.md).
 * ------------------------------------------------------------------------------------------------- */

#define KILN_MAX_TENSORS 65536u              /* tensors in a GGUF file */
#define KILN_MAX_KVS 65536u                  /* metadata key/value pairs in a GGUF file */
#define KILN_MAX_METADATA_BYTES (256u << 20) /* header, metadata and tensor infos of a GGUF file */
#define KILN_MAX_NAME_BYTES 65536u           /* a metadata key or tensor name */
#define KILN_MAX_STRING_BYTES (16u << 20)    /* a string value, or one element of a string array */
#define KILN_MAX_ARRAY_LEN (1u << 24)        /* elements of a metadata array */
#define KILN_MAX_TENSOR_DIMS 4               /* dimensions of a tensor */
#define KILN_MAX_VOCAB (1 << 20)             /* tokens in a vocabulary */
#define KILN_MAX_CTX (1 << 24)               /* a model's context_length and kiln_ctx_params.n_ctx */
#define KILN_MAX_BATCH (1 << 24)             /* kiln_batch_init capacity and kiln_ctx_params.n_batch */

/* ---------------------------------------------------------------------------------------------------
 * Tensor element types. The numeric values are those of the GGUF/ggml specification.
 * ------------------------------------------------------------------------------------------------- */

typedef enum kiln_type {
    KILN_TYPE_F32 = 0,
    KILN_TYPE_F16 = 1,
    KILN_TYPE_Q4_0 = 2,
    KILN_TYPE_Q4_1 = 3,
    KILN_TYPE_Q5_0 = 6,
    KILN_TYPE_Q5_1 = 7,
    KILN_TYPE_Q8_0 = 8,
    KILN_TYPE_Q8_1 = 9,
    KILN_TYPE_Q2_K = 10,
    KILN_TYPE_Q3_K = 11,
    KILN_TYPE_Q4_K = 12,
    KILN_TYPE_Q5_K = 13,
    KILN_TYPE_Q6_K = 14,
    KILN_TYPE_Q8_K = 15,
    KILN_TYPE_IQ2_XXS = 16,
    KILN_TYPE_IQ2_XS = 17,
    KILN_TYPE_IQ3_XXS = 18,
    KILN_TYPE_IQ1_S = 19,
    KILN_TYPE_IQ4_NL = 20,
    KILN_TYPE_IQ3_S = 21,
    KILN_TYPE_IQ2_S = 22,
    KILN_TYPE_IQ4_XS = 23,
    KILN_TYPE_I8 = 24,
    KILN_TYPE_I16 = 25,
    KILN_TYPE_I32 = 26,
    KILN_TYPE_I64 = 27,
    KILN_TYPE_F64 = 28,
    KILN_TYPE_IQ1_M = 29,
    KILN_TYPE_BF16 = 30,
    KILN_TYPE_TQ1_0 = 34,
    KILN_TYPE_TQ2_0 = 35,
    KILN_TYPE_MXFP4 = 39,
    KILN_TYPE_COUNT = 40 /* one past the largest value known to the specification */
} kiln_type;

/* Static facts about a type. A type that GGUF defines but Kiln cannot compute with reports
 * supported = false; its sizes are still given so that files containing it can be read and inspected. */
typedef struct kiln_type_traits {
    const char *name;    /* "f32", "q4_0", ... */
    int64_t block_elems; /* elements per block: 1 for scalar types, 32 for Q8_0, ... */
    size_t block_bytes;  /* bytes per block */
    bool known;          /* defined by the GGUF specification */
    bool supported;      /* Kiln can dequantize it and use it as matmul weights */
} kiln_type_traits;

/* Traits of a type; returns KILN_E_INVALID_ARG for a value the specification does not define. */
kiln_status kiln_type_get_traits(int32_t type, kiln_type_traits *out);

/* Bytes taken by a row of n elements (n must be a multiple of the block size; overflow-checked). */
kiln_status kiln_type_row_bytes(kiln_type type, int64_t n, size_t *out);

/* Dequantize n elements (a multiple of the block size) from src into dst, scalar reference code. */
kiln_status kiln_dequantize(kiln_type type, const void *src, float *dst, int64_t n);

float kiln_fp16_to_fp32(uint16_t h);
uint16_t kiln_fp32_to_fp16(float f); /* round to nearest even; NaN stays NaN */
float kiln_bf16_to_fp32(uint16_t h);
uint16_t kiln_fp32_to_bf16(float f); /* round to nearest even; NaN stays NaN (quiet) */

/* ---------------------------------------------------------------------------------------------------
 * Quantization (see docs/quantization.md): float rows to block types, and whole GGUF files to the
 * mixes users know (Q4_K_M, Q5_K_M, ...).
 * ------------------------------------------------------------------------------------------------- */

/* True for the types kiln_quantize_row can produce: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4. */
bool kiln_quantize_supported(kiln_type type);

/* Quantize n floats (a multiple of the block size, all finite: KILN_E_RANGE names the first that is not)
 * into dst, which holds kiln_type_row_bytes(type, n) bytes aligned for the type's fields. The reference
 * algorithms are those of llama.cpp (bit-exact with the gguf Python package where it implements the type);
 * importance weights are not used. */
kiln_status kiln_quantize_row(kiln_type type, const float *src, void *dst, int64_t n);

/* The quantization mixes of llama.cpp's quantize tool: a base type, with more bits for the tensors that
 * matter most (attention V and FFN down in the _M mixes, the output projection everywhere). */
typedef enum kiln_quant_mix {
    KILN_MIX_Q4_0 = 2, /* values are llama.cpp's general.file_type numbers */
    KILN_MIX_Q8_0 = 7,
    KILN_MIX_Q2_K = 10,
    KILN_MIX_Q3_K_M = 12,
    KILN_MIX_Q4_K_S = 14,
    KILN_MIX_Q4_K_M = 15,
    KILN_MIX_Q5_K_M = 17,
    KILN_MIX_Q6_K = 18,
} kiln_quant_mix;

/* "Q4_K_M" (case-insensitive) -> KILN_MIX_Q4_K_M; KILN_E_INVALID_ARG lists the known names. */
kiln_status kiln_quant_mix_parse(const char *name, kiln_quant_mix *out);
const char *kiln_quant_mix_name(kiln_quant_mix mix); /* "Q4_K_M"; "?" for an unknown value */

typedef struct kiln_quantize_params {
    kiln_quant_mix mix;
    bool allow_requantize; /* accept already-quantized input tensors (dequantized, then requantized) */
} kiln_quantize_params;

/* Defaults: Q4_K_M, no requantization. */
kiln_quantize_params kiln_quantize_params_default(void);

/* Called before each tensor is written: its index, the tensor count, its name and the chosen type. */
typedef void (*kiln_quantize_progress_fn)(void *user, int64_t index, int64_t count, const char *name,
                                          kiln_type type);

/* Quantize the GGUF file `in` into `out` with a mix: all metadata is kept (general.file_type and
 * general.quantization_version are set), 1-D tensors (norms) keep their type, each matrix gets the type
 * the mix chooses (see docs/quantization.md). Tensors are converted one at a time, row by row, while the
 * file is written; the output appears atomically (temporary file, then rename) and no partial file is
 * left on error. progress may be NULL. */
kiln_status kiln_quantize_file(const char *in, const char *out, const kiln_quantize_params *params,
                               kiln_quantize_progress_fn progress, void *user);

/* The type each tensor of a model gets in a mix, exactly as kiln_quantize_file chooses it, for writers that
 * make a quantized file directly (`kiln synth`). Reads the name, type, n_dims and ne of `count` tensors in
 * file order; n_gqa is the model's attention heads per KV head (values below 1 mean 1). types[i] receives
 * tensor i's type: its own type for the tensors a mix copies as they are (1-D, not named "*weight"). */
struct kiln_tensor_info;
kiln_status kiln_quant_mix_types(kiln_quant_mix mix, const struct kiln_tensor_info *tensors, int64_t count,
                                 int64_t n_gqa, kiln_type *types);

/* ---------------------------------------------------------------------------------------------------
 * GGUF files (versions 2 and 3): reading, validated field by field, with the data section mapped
 * read-only and used in place; and writing.
 * ------------------------------------------------------------------------------------------------- */

typedef enum kiln_gguf_type {
    KILN_GGUF_UINT8 = 0,
    KILN_GGUF_INT8 = 1,
    KILN_GGUF_UINT16 = 2,
    KILN_GGUF_INT16 = 3,
    KILN_GGUF_UINT32 = 4,
    KILN_GGUF_INT32 = 5,
    KILN_GGUF_FLOAT32 = 6,
    KILN_GGUF_BOOL = 7,
    KILN_GGUF_STRING = 8,
    KILN_GGUF_ARRAY = 9,
    KILN_GGUF_UINT64 = 10,
    KILN_GGUF_INT64 = 11,
    KILN_GGUF_FLOAT64 = 12,
    KILN_GGUF_TYPE_COUNT = 13
} kiln_gguf_type;

typedef struct kiln_gguf kiln_gguf;

/* A string inside a GGUF file: not NUL-terminated in general. */
typedef struct kiln_str {
    const char *data;
    size_t len;
} kiln_str;

typedef struct kiln_tensor_info {
    const char *name; /* NUL-terminated, valid while the kiln_gguf is open */
    kiln_type type;
    int32_t n_dims;    /* 1..4 */
    int64_t ne[4];     /* elements per dimension, ne[0] innermost; unused dims are 1 */
    uint64_t offset;   /* offset inside the data section */
    size_t size;       /* bytes */
    const void *data;  /* points into the mapping; valid while the kiln_gguf is open */
} kiln_tensor_info;

/* Open and validate a GGUF file. The file is memory-mapped; tensor data is used in place. */
kiln_status kiln_gguf_open(const char *path, kiln_gguf **out);

/* Parse a GGUF image already in memory. The buffer is borrowed and must outlive the handle. */
kiln_status kiln_gguf_open_memory(const void *data, size_t size, kiln_gguf **out);

void kiln_gguf_close(kiln_gguf *gguf);

uint32_t kiln_gguf_version(const kiln_gguf *gguf);
size_t kiln_gguf_alignment(const kiln_gguf *gguf);
size_t kiln_gguf_data_offset(const kiln_gguf *gguf); /* where the data section starts in the file */

/* Key/value metadata, in file order. Indexes run from 0 to kv_count - 1. */
int64_t kiln_gguf_kv_count(const kiln_gguf *gguf);
int64_t kiln_gguf_find_key(const kiln_gguf *gguf, const char *key); /* -1 when absent */
const char *kiln_gguf_kv_key(const kiln_gguf *gguf, int64_t i);      /* NUL-terminated */
kiln_gguf_type kiln_gguf_kv_type(const kiln_gguf *gguf, int64_t i);
/* For arrays: the element type and the number of elements. */
kiln_gguf_type kiln_gguf_arr_type(const kiln_gguf *gguf, int64_t i);
uint64_t kiln_gguf_arr_len(const kiln_gguf *gguf, int64_t i);
/* Raw little-endian element storage of a numeric array, aligned for its element type (NULL for string
 * arrays); valid while the kiln_gguf is open. */
const void *kiln_gguf_arr_data(const kiln_gguf *gguf, int64_t i);
kiln_status kiln_gguf_arr_str(const kiln_gguf *gguf, int64_t i, uint64_t j, kiln_str *out);

/* Scalar getters by key. Each fails with KILN_E_NOT_FOUND when the key is absent and KILN_E_FORMAT
 * when the stored type differs (the message names the key and both types). get_int accepts any integer
 * type and fails with KILN_E_RANGE if the value does not fit in int64_t; get_float accepts FLOAT32 and
 * FLOAT64. */
kiln_status kiln_gguf_get_u32(const kiln_gguf *gguf, const char *key, uint32_t *out);
kiln_status kiln_gguf_get_f32(const kiln_gguf *gguf, const char *key, float *out);
kiln_status kiln_gguf_get_bool(const kiln_gguf *gguf, const char *key, bool *out);
kiln_status kiln_gguf_get_str(const kiln_gguf *gguf, const char *key, kiln_str *out);
kiln_status kiln_gguf_get_int(const kiln_gguf *gguf, const char *key, int64_t *out);
kiln_status kiln_gguf_get_float(const kiln_gguf *gguf, const char *key, double *out);

/* Tensors, in file order. */
int64_t kiln_gguf_tensor_count(const kiln_gguf *gguf);
int64_t kiln_gguf_find_tensor(const kiln_gguf *gguf, const char *name); /* -1 when absent */
kiln_status kiln_gguf_tensor_info(const kiln_gguf *gguf, int64_t i, kiln_tensor_info *out);

/* Writer. Keys and tensors are written in the order they were added; the data section is laid out with
 * each tensor at the next multiple of the alignment, padded with zeros, as the specification does.
 * Reading a canonical file and writing back every key and tensor reproduces it byte for byte. */
typedef struct kiln_gguf_writer kiln_gguf_writer;

/* Produces the bytes of one tensor while the file is written (for streaming large models). It must
 * write exactly `size` bytes to dst. */
typedef kiln_status (*kiln_tensor_fill_fn)(void *user, int64_t tensor_index, void *dst, size_t size);

kiln_status kiln_gguf_writer_create(kiln_gguf_writer **out);
void kiln_gguf_writer_destroy(kiln_gguf_writer *w);
kiln_status kiln_gguf_writer_set_version(kiln_gguf_writer *w, uint32_t version); /* 2 or 3; default 3 */
/* Sets the layout alignment (a power of two). It does not add a general.alignment key by itself. */
kiln_status kiln_gguf_writer_set_alignment(kiln_gguf_writer *w, size_t alignment);
/* Scalar values: `value` points to one element of the given type (uint8_t for BOOL). */
kiln_status kiln_gguf_writer_add_scalar(kiln_gguf_writer *w, const char *key, kiln_gguf_type type,
                                        const void *value);
kiln_status kiln_gguf_writer_add_str(kiln_gguf_writer *w, const char *key, const char *value, size_t len);
/* Numeric arrays: n elements of elem_type, packed little-endian. */
kiln_status kiln_gguf_writer_add_array(kiln_gguf_writer *w, const char *key, kiln_gguf_type elem_type,
                                       const void *data, uint64_t n);
kiln_status kiln_gguf_writer_add_str_array(kiln_gguf_writer *w, const char *key, const kiln_str *strs,
                                           uint64_t n);
/* Copy key i of an open file, whatever its type. */
kiln_status kiln_gguf_writer_copy_kv(kiln_gguf_writer *w, const kiln_gguf *src, int64_t i);
/* Add a tensor. `data` (borrowed until the write) holds its bytes; pass NULL to have `fill` produce them
 * during the write instead. */
kiln_status kiln_gguf_writer_add_tensor(kiln_gguf_writer *w, const char *name, kiln_type type,
                                        int32_t n_dims, const int64_t *ne, const void *data);
void kiln_gguf_writer_set_fill(kiln_gguf_writer *w, kiln_tensor_fill_fn fill, void *user);
kiln_status kiln_gguf_writer_write_file(kiln_gguf_writer *w, const char *path);
/* Write into a buffer allocated with the Kiln allocator; free it with kiln_free(). */
kiln_status kiln_gguf_writer_write_memory(kiln_gguf_writer *w, void **out, size_t *size);

/* Free memory that Kiln returned to the caller. */
void kiln_free(void *ptr);

/* ---------------------------------------------------------------------------------------------------
 * Vocabulary and tokenizer
 * ------------------------------------------------------------------------------------------------- */

typedef struct kiln_vocab kiln_vocab;

typedef enum kiln_token_attr {
    KILN_TOKEN_NORMAL = 1,
    KILN_TOKEN_UNKNOWN = 2,
    KILN_TOKEN_CONTROL = 3,
    KILN_TOKEN_USER_DEFINED = 4,
    KILN_TOKEN_UNUSED = 5,
    KILN_TOKEN_BYTE = 6
} kiln_token_attr;

/* Build a vocabulary from the tokenizer.* keys of a GGUF file (vocab-only files work). */
kiln_status kiln_vocab_create(const kiln_gguf *gguf, kiln_vocab **out);
void kiln_vocab_destroy(kiln_vocab *vocab);

int32_t kiln_vocab_n_tokens(const kiln_vocab *vocab);
int32_t kiln_vocab_bos(const kiln_vocab *vocab); /* -1 if none */
int32_t kiln_vocab_eos(const kiln_vocab *vocab); /* -1 if none */
bool kiln_vocab_add_bos(const kiln_vocab *vocab);
/* Whether a whole sequence ends with EOS: true for WordPiece ("bert") vocabularies, whose sequences are
 * [CLS] ... [SEP] (BOS is [CLS] and EOS [SEP] there). kiln_tokenize adds only BOS; callers append EOS. */
bool kiln_vocab_add_eos(const kiln_vocab *vocab);
/* The raw token text as stored in the vocabulary; valid while the vocab lives. */
kiln_str kiln_vocab_token_text(const kiln_vocab *vocab, int32_t id);
/* The id whose text is exactly text[0..len) (such as "<|im_end|>"), or -1. */
int32_t kiln_vocab_find_token(const kiln_vocab *vocab, const char *text, size_t len);
/* The token's kiln_token_attr; 0 for an id outside the vocabulary. */
int32_t kiln_vocab_token_attr(const kiln_vocab *vocab, int32_t id);

/* Tokenize len bytes of text. Writes at most cap ids; *n_out receives the number of ids the text needs,
 * and the call fails with KILN_E_RANGE when that exceeds cap. USER_DEFINED tokens in the text are always
 * recognized; the texts of CONTROL tokens (such as "<|im_end|>") are tokenized as plain text. */
kiln_status kiln_tokenize(const kiln_vocab *vocab, const char *text, size_t len, bool add_bos, int32_t *ids,
                          size_t cap, size_t *n_out);
/* As kiln_tokenize; with parse_special, the texts of CONTROL and UNKNOWN tokens also become those tokens
 * (longer ones first), which chat templates need. */
kiln_status kiln_tokenize_special(const kiln_vocab *vocab, const char *text, size_t len, bool add_bos,
                                  bool parse_special, int32_t *ids, size_t cap, size_t *n_out);

/* Streaming detokenizer: feed ids one at a time; it returns the bytes that are complete. Multi-byte
 * UTF-8 characters split across byte-fallback tokens are held back until complete; bytes that can never
 * form valid UTF-8 are emitted as U+FFFD. The leading space added by the tokenizer is removed from the
 * first text token when the stream starts at the beginning of a sequence (SentencePiece and WordPiece;
 * byte-level BPE adds no space, so strip_leading_space has no effect there). */
typedef struct kiln_detok kiln_detok;
kiln_status kiln_detok_create(const kiln_vocab *vocab, bool strip_leading_space, kiln_detok **out);
void kiln_detok_destroy(kiln_detok *detok);
/* Append the text for `id`. *out points to bytes valid until the next call on this detok. */
kiln_status kiln_detok_push(kiln_detok *detok, int32_t id, kiln_str *out);
/* Emit whatever is held back (incomplete UTF-8 becomes U+FFFD). */
kiln_status kiln_detok_flush(kiln_detok *detok, kiln_str *out);

/* Detokenize a whole sequence into buf (NUL-terminated). *n_out receives the length needed without the
 * terminator; fails with KILN_E_RANGE if it does not fit. */
kiln_status kiln_detokenize(const kiln_vocab *vocab, const int32_t *ids, size_t n, bool strip_leading_space,
                            char *buf, size_t cap, size_t *n_out);

/* ---------------------------------------------------------------------------------------------------
 * Chat templates: the conversation formats of instruction-tuned models, recognized from a model's
 * tokenizer.chat_template by the markers they contain (Kiln does not run Jinja). Names: "chatml" (Qwen),
 * "llama3", "phi3", "mistral", and "plain", Kiln's "User: ...\nAssistant:" fallback. Templates are static.
 * ------------------------------------------------------------------------------------------------- */

typedef struct kiln_chat_template kiln_chat_template;

typedef struct kiln_chat_message {
    const char *role; /* "system" (first message only), "user", "assistant" or "tool" (a result) */
    const char *content;
} kiln_chat_message;

const kiln_chat_template *kiln_chat_template_by_name(const char *name); /* NULL for an unknown name */
const char *kiln_chat_template_names(void);                             /* "chatml, llama3, ..." */
const char *kiln_chat_template_name(const kiln_chat_template *t);
/* The text of the token that ends an assistant turn ("<|im_end|>"), or NULL when EOS ends it. */
const char *kiln_chat_template_end_of_turn(const kiln_chat_template *t);
/* Recognize a template text. Fails with KILN_E_UNSUPPORTED for a template Kiln does not know. */
kiln_status kiln_chat_template_recognize(const char *text, size_t len, const kiln_chat_template **out);
/* Recognize a model's tokenizer.chat_template; KILN_E_NOT_FOUND when the file has none. */
kiln_status kiln_chat_template_detect(const kiln_gguf *gguf, const kiln_chat_template **out);
/* Render n messages into buf (NUL-terminated), with the header that opens the assistant's reply when
 * add_generation_prompt is set. BOS is not included; content is not trimmed. *n_out receives the length
 * needed; fails with KILN_E_RANGE when it does not fit. A rendering with the generation prompt is a prefix
 * of the rendering with the reply appended, so a chat loop can feed only the new text. */
kiln_status kiln_chat_render(const kiln_chat_template *t, const kiln_chat_message *msgs, size_t n,
                             bool add_generation_prompt, char *buf, size_t cap, size_t *n_out);

/* ---------------------------------------------------------------------------------------------------
 * Sampling
 * ------------------------------------------------------------------------------------------------- */

typedef struct kiln_sampler_params {
    float temperature;    /* <= 0: greedy (argmax, lowest id on ties) */
    int32_t top_k;        /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    int32_t repeat_last_n;/* how many recent tokens the penalty looks at */
    uint64_t seed;
} kiln_sampler_params;

/* Defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1 (off), repeat_last_n 64,
 * seed 0. The chain runs in llama.cpp's order: repeat penalty, top-k, top-p, min-p, temperature, draw
 * (see docs/tokenizer.md). NaN logits count as -inf. */
kiln_sampler_params kiln_sampler_params_default(void);

typedef struct kiln_sampler kiln_sampler;
kiln_status kiln_sampler_create(int32_t n_vocab, const kiln_sampler_params *params, kiln_sampler **out);
void kiln_sampler_destroy(kiln_sampler *sampler);
/* Choose the next token from n_vocab logits (not modified). */
kiln_status kiln_sampler_sample(kiln_sampler *sampler, const float *logits, int32_t *token_out);
/* As kiln_sampler_sample, and distributed the same, but returning draft whenever it can: with p the
 * distribution sampled, draft with probability p(draft), else a draw from p without draft (greedy:
 * draft exactly when it is the argmax). Speculative decoding accepts a guessed token when this returns
 * it, which keeps the sampler's distribution (rejection sampling). */
kiln_status kiln_sampler_sample_draft(kiln_sampler *sampler, const float *logits, int32_t draft,
                                      int32_t *token_out);
/* Record a token as part of the history (the prompt and each sampled token) for the repeat penalty.
 * Ids outside [0, n_vocab) are ignored. */
void kiln_sampler_accept(kiln_sampler *sampler, int32_t token);

/* ---------------------------------------------------------------------------------------------------
 * Grammars: constrained decoding (see docs/grammar.md). A grammar in GBNF, llama.cpp's format (or
 * compiled from a JSON Schema), restricts sampling to the tokens that keep the text a prefix of one of
 * its sentences, and allows the end tokens (EOS, end of turn) only when the text is a whole sentence.
 * A kiln_grammar and a kiln_grammar_vocab are immutable once made and may be shared across threads; a
 * matcher is one sequence's state and is used by one thread at a time. Both borrowed objects must
 * outlive the matchers made from them.
 * ------------------------------------------------------------------------------------------------- */

typedef struct kiln_grammar kiln_grammar;
typedef struct kiln_grammar_vocab kiln_grammar_vocab;
typedef struct kiln_grammar_matcher kiln_grammar_matcher;

/* Compile GBNF text (len bytes; rules, alternation, grouping, * + ? {m,n}, classes, escapes, comments;
 * matching starts at the rule `root`). KILN_E_FORMAT says what is wrong and where ("grammar: line 3,
 * column 7: ..."): a syntax error, an undefined rule, no root, left recursion, a limit passed. */
kiln_status kiln_grammar_parse(const char *text, size_t len, kiln_grammar **out);
void kiln_grammar_destroy(kiln_grammar *grammar);

/* Compile a JSON Schema (len bytes of JSON) to GBNF text whose sentences are the JSON documents that
 * validate against it (the subset in docs/grammar.md: types, properties, required, enum, const, arrays
 * with minItems/maxItems, nested objects, additionalProperties, anyOf/oneOf, string formats date-time,
 * date, time, uuid, $ref to #/$defs). *gbnf (NUL-terminated, free with kiln_free) and *gbnf_len receive
 * it. A schema that is not JSON is KILN_E_FORMAT, one that uses what Kiln cannot enforce is
 * KILN_E_UNSUPPORTED; both messages name the place in the schema ("schema at /properties/age: ..."). */
kiln_status kiln_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, size_t *gbnf_len);

/* The bytes of every token in a trie, for masks. end_tokens lists the tokens that end the text (EOS,
 * the chat template's end of turn); NULL means the vocabulary's EOS. Control and unknown tokens and
 * tokens that print nothing are never allowed under a grammar. */
kiln_status kiln_grammar_vocab_create(const kiln_vocab *vocab, const int32_t *end_tokens, int32_t n_end,
                                      kiln_grammar_vocab **out);
void kiln_grammar_vocab_destroy(kiln_grammar_vocab *vocab);
int32_t kiln_grammar_vocab_n_tokens(const kiln_grammar_vocab *vocab);

/* A matcher at the start of the grammar. vocab may be NULL for a matcher fed text only (no masks). */
kiln_status kiln_grammar_matcher_create(const kiln_grammar *grammar, const kiln_grammar_vocab *vocab,
                                        kiln_grammar_matcher **out);
void kiln_grammar_matcher_destroy(kiln_grammar_matcher *matcher);
kiln_status kiln_grammar_matcher_reset(kiln_grammar_matcher *matcher); /* back to the start */
/* The tokens allowed next: bit (t & 31) of word t / 32 is set for an allowed token t. Valid until the
 * next call on the matcher. All zero when nothing can follow (the caller reports that as an error). */
kiln_status kiln_grammar_matcher_mask(kiln_grammar_matcher *matcher, const uint32_t **bits);
/* Advance by a token (an end token ends the text). KILN_E_INVALID_ARG, with the state unchanged, when the
 * grammar does not allow it. */
kiln_status kiln_grammar_matcher_accept(kiln_grammar_matcher *matcher, int32_t token);
/* Advance by UTF-8 text (a character may be split across calls). KILN_E_INVALID_ARG names the first byte
 * the grammar refuses; the state is then unchanged. */
kiln_status kiln_grammar_matcher_accept_text(kiln_grammar_matcher *matcher, const char *text, size_t len);
/* Whether the text so far is a whole sentence (an end token is allowed now). */
bool kiln_grammar_matcher_can_end(const kiln_grammar_matcher *matcher);
/* Whether nothing but the end can follow. */
bool kiln_grammar_matcher_is_done(const kiln_grammar_matcher *matcher);

typedef struct kiln_grammar_stats {
    uint64_t cache_hits, cache_misses; /* masks served from the per-state cache, and walked */
    uint64_t advances;                 /* parse-stack sets advanced by one character during walks */
} kiln_grammar_stats;
void kiln_grammar_matcher_stats(const kiln_grammar_matcher *matcher, kiln_grammar_stats *out);

/* Constrain a sampler by a matcher (borrowed until it is replaced; NULL removes it): each
 * kiln_sampler_sample then considers only the tokens the matcher allows and advances the matcher by the
 * token it returns. When the grammar allows no token, sampling fails with KILN_E_UNSUPPORTED. */
kiln_status kiln_sampler_set_grammar(kiln_sampler *sampler, kiln_grammar_matcher *matcher);

/* ---------------------------------------------------------------------------------------------------
 * Models, contexts and batches (see docs/runtime.md)
 *
 * A model is the shared engine: the mapped weights, the backends in priority order (the CPU last, as the
 * universal fallback), the CPU thread pool, and the weights prepared (repacked) for the kernels, made once
 * and shared by every context of the model. A context owns only per-user state: its KV cache, a pool of
 * n_ctx cells shared by up to n_seq_max sequences, its compiled plans and their arena, and its outputs.
 *
 * Thread safety: a model may be shared by contexts used from different threads; their computations take
 * turns on the model's backends (one graph at a time per model). A context, a batch, a sampler and a detok
 * are each used by one thread at a time. kiln_set_allocator and kiln_set_cpu_level are process-wide and
 * must not run while other Kiln calls do.
 * ------------------------------------------------------------------------------------------------- */

typedef struct kiln_model kiln_model;
typedef struct kiln_ctx kiln_ctx;

/* Progress of a long step (preparing weights): done of total units. Called on the calling thread. */
typedef void (*kiln_progress_fn)(void *user, uint64_t done, uint64_t total);

typedef struct kiln_model_params {
    int32_t n_threads;       /* CPU thread pool size; 0 = kiln_default_threads() */
    const char *devices;     /* backends in priority order, comma-separated; NULL or "" = "cpu". Each
                              * entry is NAME or NAME@N, where N is the smallest batch (tokens) for which
                              * the backend takes a node (the cost rule); "cpu" is appended when absent.
                              * Names: "cpu"; "vulkan" (Vulkan device 0 of kiln_device_get, a CPU device
                              * such as lavapipe included) or "vulkan:N" (device N); "auto" (the first
                              * discrete or integrated GPU, never a CPU device; nothing when there is
                              * none); "cpu-restricted:OP+OP+..." a second CPU backend with its own
                              * buffers that runs only the listed ops (op names as kiln graph prints them),
                              * for testing the scheduler without a GPU. A Vulkan entry whose loader or
                              * device is missing is dropped and the CPU runs its nodes: the model loads,
                              * and kiln_model_device_note says why (docs/vulkan.md). */
    kiln_progress_fn progress; /* weight preparation progress, or NULL */
    void *progress_user;
    int32_t gpu_layers; /* partial offload (llama.cpp's -ngl): the backends before the CPU run only the last
                         * gpu_layers layers (their nodes, weights and KV cache) and the output head; the CPU
                         * runs the embeddings and the layers before. 0 (the default), or at least the layer
                         * count: everything; KILN_GPU_LAYERS_NONE: nothing; KILN_GPU_LAYERS_AUTO: as many
                         * as fit in the first device's memory (docs/runtime.md, Partial offload). */
} kiln_model_params;

#define KILN_GPU_LAYERS_NONE (-1)
#define KILN_GPU_LAYERS_AUTO (-2)

/* Defaults: every field zero or NULL. */
kiln_model_params kiln_model_params_default(void);

/* Load a model: map the file, validate every tensor the architecture needs, read the hyperparameters,
 * start the backends. kiln_model_load(path, out) is kiln_model_load_ex with the defaults. */
kiln_status kiln_model_load_ex(const char *path, const kiln_model_params *params, kiln_model **out);
kiln_status kiln_model_load(const char *path, kiln_model **out);
void kiln_model_destroy(kiln_model *model); /* after every context of the model is destroyed */

const kiln_gguf *kiln_model_gguf(const kiln_model *model); /* valid while the model lives */
const kiln_vocab *kiln_model_vocab(const kiln_model *model);
int32_t kiln_model_n_ctx_train(const kiln_model *model);
int32_t kiln_model_n_vocab(const kiln_model *model);
const char *kiln_model_arch(const kiln_model *model);
/* E: the width of the model's hidden states, and so of its sentence embeddings. */
int32_t kiln_model_n_embd(const kiln_model *model);

/* How an encoder's token states become one sentence embedding (docs/embeddings.md). The values are
 * llama.cpp's <arch>.pooling_type numbers. */
typedef enum kiln_pooling {
    KILN_POOLING_UNSPECIFIED = -1, /* kiln_ctx_params.pooling: use the model's */
    KILN_POOLING_NONE = 0,         /* the file names none: a context must choose one */
    KILN_POOLING_MEAN = 1,         /* the mean of the sequence's token states */
    KILN_POOLING_CLS = 2,          /* the state of the sequence's first token ([CLS], position 0) */
    KILN_POOLING_LAST = 3,         /* the state of the sequence's last token */
} kiln_pooling;

/* The model's <arch>.pooling_type (KILN_POOLING_NONE when the file has none, as for every decoder). */
kiln_pooling kiln_model_pooling(const kiln_model *model);
/* Whether attention is causal (<arch>.attention.causal, true when absent): false for an encoder such as
 * BERT, whose tokens see their whole sequence and whose contexts return embeddings, not logits. */
bool kiln_model_is_causal(const kiln_model *model);
/* Total bytes of weights. */
uint64_t kiln_model_weight_bytes(const kiln_model *model);
int32_t kiln_model_n_threads(const kiln_model *model);

/* A device backend's memory pool (docs/vulkan.md): blocks from the driver, sub-allocated, and freed
 * buffers kept in size buckets for reuse. */
typedef struct kiln_device_memory {
    uint64_t allocations; /* device allocations made (vkAllocateMemory of a block) */
    uint64_t frees;       /* blocks given back to the driver */
    uint64_t requests;    /* buffers asked of the pool (arenas, weights) */
    uint64_t reuses;      /* requests served by a freed buffer of the same size bucket */
    uint64_t evictions;   /* freed buffers released, least recently used first, to bound the cache */
    uint64_t bytes;       /* device memory held now */
    uint64_t peak_bytes;  /* the most bytes of buffers in use at once */
    uint64_t weight_bytes; /* of that, weights uploaded */
} kiln_device_memory;

/* What a model holds beyond the mapped file, shared by all its contexts. */
typedef struct kiln_model_memory {
    uint64_t file_bytes;     /* size of the GGUF file */
    int32_t n_prepared;      /* weights prepared for the kernels (repacked copies), over all backends */
    uint64_t prepared_bytes; /* their bytes */
    uint64_t released_bytes; /* mapped file bytes handed back to the kernel after their weight was prepared */
    uint64_t const_bytes;    /* constants made by graph passes (merged weights that were not adjacent) */
    kiln_device_memory device; /* the device backends' memory pools, summed (zeros on the CPU alone) */
} kiln_model_memory;

kiln_status kiln_model_memory_info(const kiln_model *model, kiln_model_memory *out);

/* ---- Kernel profile (docs/vulkan.md and docs/runtime.md, Profiling) ----
 * Off by default. While it is on, every backend that can times its kernels: a Vulkan device writes a device
 * timestamp after every dispatch of every submission (replayed ones too) and adds the time since the one
 * before to its kernel's row (with no barrier between two dispatches the second may overlap the first, and
 * then the time is the last one's; switching the profile on or off makes it record its command buffers
 * anew); the CPU adds each node's wall time on its thread pool, start to end-of-node barrier, to its op's
 * row. */
#define KILN_PROFILE_KERNELS 64 /* rows: a device's pipelines and the CPU's ops of one model fit */
typedef struct kiln_kernel_time {
    char name[32];  /* a device's shader and variant ("mul_mv q4_0", "attention f16"), the CPU's op and
                     * weight type ("matmul q4_0", "rms_norm_mul") */
    uint64_t calls; /* dispatches */
    uint64_t ns;    /* device time */
} kiln_kernel_time;

typedef struct kiln_device_profile {
    uint64_t computes;  /* node ranges the backends ran (a device: one submission each) */
    uint64_t recorded;  /* of those, recorded anew by a device (the rest replayed a recording) */
    uint64_t record_ns; /* host time preparing them: a device's recording and weight uploads, the CPU's
                         * weight packing and scratch */
    uint64_t submit_ns; /* host time running them: from a device submission until its fence signalled, the
                         * CPU pool's run */
    uint64_t kernel_ns; /* device time of the kernels: the rows' sum */
    uint64_t unattributed; /* dispatches past a recording's timestamp capacity (in no row) */
    int32_t n_kernels;  /* rows below, the most time first */
    kiln_kernel_time kernels[KILN_PROFILE_KERNELS];
} kiln_device_profile;

/* on: clear the counters and start; off: stop (the counters stay readable). KILN_E_UNSUPPORTED when no
 * backend of the model can (a device without timestamps on its compute queue, and no CPU backend). */
kiln_status kiln_model_profile(kiln_model *model, bool on);
kiln_status kiln_model_profile_read(const kiln_model *model, kiln_device_profile *out);

/* The backends a model runs on, in priority order, as "vulkan:0 (llvmpipe ...),cpu"; valid while the
 * model lives. */
const char *kiln_model_backends(const kiln_model *model);
/* Why a device named in kiln_model_params.devices was dropped (one line, e.g. "vulkan: no Vulkan loader
 * (libvulkan.so.1: cannot open shared object file); its nodes run on the CPU"), or NULL when every device
 * started. Valid while the model lives. */
const char *kiln_model_device_note(const kiln_model *model);

/* ---- Compute devices ----
 * The Vulkan physical devices the backend can use (docs/vulkan.md). The list is read once per process;
 * it is empty when Kiln was built without Vulkan or no loader or device is present, and then
 * kiln_devices_note says why. */
typedef enum kiln_device_type {
    KILN_DEVICE_OTHER = 0,
    KILN_DEVICE_INTEGRATED_GPU = 1,
    KILN_DEVICE_DISCRETE_GPU = 2,
    KILN_DEVICE_VIRTUAL_GPU = 3,
    KILN_DEVICE_CPU = 4, /* a software rasterizer such as Mesa's lavapipe: "auto" never picks it */
} kiln_device_type;

typedef struct kiln_device_info {
    int32_t index;                    /* as in "vulkan:N" */
    char name[256];
    kiln_device_type type;
    uint32_t vendor_id, device_id;
    uint32_t api_version;             /* VK_MAKE_API_VERSION packing: major << 22 | minor << 12 | patch */
    int32_t n_heaps;                  /* memory heaps (at most 8 listed below) */
    uint64_t heap_bytes[8];
    bool heap_device_local[8];
    bool fp16;                        /* shaderFloat16 */
    bool int8;                        /* shaderInt8 */
    bool storage16;                   /* storageBuffer16BitAccess */
    bool integer_dot;                 /* shaderIntegerDotProduct (Vulkan 1.3 or VK_KHR_shader_integer_dot_product) */
    uint32_t subgroup_size;
    bool subgroup_arithmetic;         /* subgroup arithmetic in compute shaders: the reductions of matmul, norm
                                       * and softmax use it (else their shared-memory variant) */
    uint64_t max_storage_buffer_range; /* bytes one storage-buffer binding may span */
    uint32_t max_shared_memory;        /* maxComputeSharedMemorySize, bytes */
    uint32_t max_workgroup_invocations;
} kiln_device_info;

/* The number of Vulkan devices (0 when none; see kiln_devices_note). */
int32_t kiln_device_count(void);
/* Device i (0 <= i < kiln_device_count()); KILN_E_RANGE otherwise. */
kiln_status kiln_device_get(int32_t i, kiln_device_info *out);
/* Why the list is empty ("built without Vulkan", "no Vulkan loader (...)", "no Vulkan device"), or NULL. */
const char *kiln_devices_note(void);
/* "discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other". */
const char *kiln_device_type_name(kiln_device_type type);

/* The process-wide CPU kernel level: "ref", "avx2", "avx512", "amx" or "neon" (a level this CPU lacks
 * falls back down its chain); NULL or "auto" = the best level this CPU supports. It applies from the next
 * computation on; call it only while no computation runs. */
kiln_status kiln_set_cpu_level(const char *name);
/* The active level's name: after kiln_set_cpu_level, the level it chose. */
const char *kiln_get_cpu_level(void);

/* Called between graph nodes during a computation; returning true stops it: the call fails with
 * KILN_E_ABORTED and the context is as before the call. */
typedef bool (*kiln_abort_fn)(void *user);

/* A log line (no trailing newline) from the runtime: what was compiled, how long it took, the split of
 * a graph between backends. */
typedef void (*kiln_log_fn)(void *user, const char *line);

typedef struct kiln_ctx_params {
    int32_t n_ctx;      /* KV-cache cells (tokens over all sequences), at most KILN_MAX_CTX; 0 = the
                         * model's context length (which a hostile file may set to KILN_MAX_CTX: a server
                         * should choose n_ctx itself) */
    int32_t n_batch;    /* most tokens one kiln_ctx_decode_batch takes, at most KILN_MAX_BATCH; 0 = 512 */
    int32_t n_seq_max;  /* sequence ids run 0 .. n_seq_max - 1 (at most KILN_SEQ_MAX); 0 = 1 */
    const char *passes; /* graph passes: "all" (NULL), "none", or a list such as "cse,dce" or "-fuse_qkv"
                         * (see docs/graph.md) */
    bool no_fuse;       /* switch off every fusion pass */
    bool check_passes;  /* verify every pass's output against the unoptimized graph (slow; for tests) */
    kiln_type kv_type;  /* KV-cache element type: KILN_TYPE_F32 (default), KILN_TYPE_F16 or KILN_TYPE_Q8_0
                         * (Q8_0 needs Hkv * head size to be a multiple of 32) */
    kiln_abort_fn abort_fn; /* or NULL */
    void *abort_user;
    kiln_log_fn log;    /* or NULL */
    void *log_user;
    bool embeddings;    /* the context returns pooled sentence embeddings (kiln_ctx_embeddings_seq), not
                         * logits; required for an encoder model (not causal), refused with
                         * KILN_E_UNSUPPORTED for a decoder */
    kiln_pooling pooling; /* embeddings: KILN_POOLING_UNSPECIFIED (default) = the model's; MEAN, CLS or
                           * LAST to choose. A model that names none needs a choice */
} kiln_ctx_params;

#define KILN_SEQ_MAX 64

kiln_ctx_params kiln_ctx_params_default(void);

kiln_status kiln_ctx_create(const kiln_model *model, const kiln_ctx_params *params, kiln_ctx **out);
void kiln_ctx_destroy(kiln_ctx *ctx);

/* A batch of tokens, each of one sequence at one position, in the style of llama.cpp's llama_batch.
 * kiln_batch_init allocates the arrays for `capacity` tokens (1 .. KILN_MAX_BATCH); the caller fills
 * them (or uses kiln_batch_add) and sets n_tokens. */
typedef struct kiln_batch {
    int32_t n_tokens;
    int32_t capacity;
    int32_t *token;  /* [capacity] token ids */
    int32_t *pos;    /* [capacity] positions in their sequence */
    int32_t *seq_id; /* [capacity] sequence ids, 0 .. n_seq_max - 1 */
    int8_t *logits;  /* [capacity] nonzero: keep this token's logits (kiln_ctx_logits) */
} kiln_batch;

kiln_status kiln_batch_init(int32_t capacity, kiln_batch *out);
void kiln_batch_free(kiln_batch *batch); /* frees the arrays; the struct is zeroed */
/* Append one token; KILN_E_RANGE when the batch is full. */
kiln_status kiln_batch_add(kiln_batch *batch, int32_t token, int32_t pos, int32_t seq_id, bool logits);
void kiln_batch_clear(kiln_batch *batch); /* n_tokens = 0 */

/* Run a batch: every token's K and V go into free cells of the KV cache, and each token attends to the
 * cells of its own sequence at positions up to its own (every position of its sequence for an encoder:
 * see kiln_ctx_embeddings_seq for what an encoder's batch must hold). Positions continue each sequence: the tokens of
 * a sequence appear in the batch in order at pos_max + 1, pos_max + 2, ... (pos_max as
 * kiln_kv_seq_pos_max; 0 for an empty sequence). The batch fails with a named error and changes nothing
 * when an argument is invalid, with KILN_E_CONTEXT_FULL when fewer cells are free than it has tokens, and
 * with KILN_E_ABORTED when the abort callback stops it. n_tokens is 1 .. n_batch. */
kiln_status kiln_ctx_decode_batch(kiln_ctx *ctx, const kiln_batch *batch);

/* The n_vocab logits of token i of the last batch (negative i counts from the end of the tokens that
 * asked for logits: -1 is the last of them). NULL, with kiln_last_error set, when token i did not ask for
 * logits. Valid until the next decode call on ctx. */
const float *kiln_ctx_logits(kiln_ctx *ctx, int32_t i);

/* The sentence embedding of sequence seq in the last batch of an embeddings context: its token states
 * pooled as the context's pooling says (the model's, or kiln_ctx_params.pooling), then scaled to unit L2
 * norm; kiln_model_n_embd floats, valid until the next decode call on ctx. NULL, with kiln_last_error set,
 * when ctx does not compute embeddings or seq had no tokens in the last batch.
 *
 * An encoder keeps nothing between batches: each batch holds whole sequences, every one starting at
 * position 0 (positions 0, 1, ... in batch order, any sequences interleaved), and their KV cells are
 * released when the batch ends; kiln_ctx_decode_batch refuses a sequence that does not start at 0 with
 * KILN_E_INVALID_ARG. The batch's logits flags are ignored: every token's state is pooled. */
const float *kiln_ctx_embeddings_seq(kiln_ctx *ctx, int32_t seq);

/* The one-sequence wrapper: append n tokens to sequence 0 (split into batches of n_batch), and set
 * *logits to the logits of the last one, valid until the next call on ctx. Fails with
 * KILN_E_CONTEXT_FULL, without changing the cache, when the tokens do not fit. */
kiln_status kiln_ctx_decode(kiln_ctx *ctx, const int32_t *tokens, int32_t n, const float **logits);
int32_t kiln_ctx_n_past(const kiln_ctx *ctx); /* kiln_kv_seq_pos_max(ctx, 0) + 1 */
int32_t kiln_ctx_n_ctx(const kiln_ctx *ctx);
int32_t kiln_ctx_n_batch(const kiln_ctx *ctx);
int32_t kiln_ctx_n_seq_max(const kiln_ctx *ctx);
void kiln_ctx_reset(kiln_ctx *ctx); /* forget every sequence */

/* The KV cache. A range [p0, p1) of positions: p0 < 0 means 0, p1 < 0 means to the end. seq -1 means
 * every sequence (for rm). Each fails with KILN_E_INVALID_ARG for an id outside 0 .. n_seq_max - 1 or a
 * range that is empty once its open ends are filled in. */
/* Forget the positions [p0, p1) of seq (every sequence when seq is -1). */
kiln_status kiln_kv_seq_rm(kiln_ctx *ctx, int32_t seq, int32_t p0, int32_t p1);
/* Make dst share src's cells at positions [p0, p1): no recomputation and no copy of K or V. In that range
 * dst must hold no cells but those it already shares with src (copying again is a no-op; src == dst too). */
kiln_status kiln_kv_seq_cp(kiln_ctx *ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1);
/* Forget every sequence but seq. */
kiln_status kiln_kv_seq_keep(kiln_ctx *ctx, int32_t seq);
/* The largest position of seq in the cache, or -1 when it holds none (or seq is out of range). */
int32_t kiln_kv_seq_pos_max(const kiln_ctx *ctx, int32_t seq);
/* Cells in use (by any sequence) and free. */
int32_t kiln_kv_n_used(const kiln_ctx *ctx);

/* Saving and restoring one sequence's KV state (docs/runtime.md, "Saving a sequence"): the positions of
 * its cells, their K and V rows in every layer, and a token history the caller keeps beside them (the
 * tokens the cells were computed from, as llama.cpp's llama_state_seq_save_file takes them). The file
 * names the model it came from (a hash of its hyperparameters and tensor table), the cache type and
 * shapes; a load checks every field, its length and a checksum, and refuses a file of another model, of
 * another cache type, truncated or corrupt with a named error, changing nothing. A loaded sequence
 * replaces seq's cells and continues exactly as the saved one would have: the next token's position is
 * its last position + 1. Loading needs as many free cells as the state holds (clear seq first when the
 * cache is tight; KILN_E_CONTEXT_FULL otherwise) and a tokens array of at least the saved history
 * (KILN_E_RANGE otherwise); *n_tokens gets the history's length. Not for an embeddings context. Saving
 * writes PATH.tmp and renames it over path. */
kiln_status kiln_ctx_state_save(kiln_ctx *ctx, const char *path, int32_t seq, const int32_t *tokens,
                                int32_t n_tokens);
kiln_status kiln_ctx_state_load(kiln_ctx *ctx, const char *path, int32_t seq, int32_t *tokens, int32_t capacity,
                                int32_t *n_tokens);
/* The same bytes in memory: the size of seq's state with n_tokens history tokens, the state written into
 * dst (size must be exactly that), and a state read back from src. */
kiln_status kiln_ctx_state_size(kiln_ctx *ctx, int32_t seq, int32_t n_tokens, size_t *out);
kiln_status kiln_ctx_state_get(kiln_ctx *ctx, int32_t seq, const int32_t *tokens, int32_t n_tokens, void *dst,
                               size_t size);
kiln_status kiln_ctx_state_set(kiln_ctx *ctx, int32_t seq, const void *src, size_t size, int32_t *tokens,
                               int32_t capacity, int32_t *n_tokens);

/* Speculative decoding of sequence 0 (docs/runtime.md, "Speculative decoding"): guessed tokens verified by
 * one batch of the target, keeping exactly the tokens greedy decoding chooses or, with a sampler, tokens
 * distributed as the sampler's own draws would be (rejection sampling). The guesses come from prompt
 * lookup (the continuation of the latest earlier occurrence of the history's last ngram_max ..
 * ngram_min tokens) or, when draft is set, from a draft model's greedy decoding in its own context (same
 * vocabulary, checked by kiln_spec_create: KILN_E_INVALID_ARG names the difference). How many tokens a
 * step guesses (0 .. n_draft) is chosen from the measured cost of each batch size and the acceptance rate
 * so far, unless fixed is set. Both contexts are borrowed and must outlive the kiln_spec;
 * kiln_spec_create clears the draft's. */
typedef struct kiln_spec_params {
    int32_t n_draft;   /* most guessed tokens per step, 1 .. 64 and below the target's n_batch; default 8 */
    int32_t ngram_min; /* prompt lookup: shortest n-gram matched; default 1 */
    int32_t ngram_max; /* longest, at most 16; default 4 */
    kiln_ctx *draft;   /* a draft model's context, or NULL for prompt lookup */
    bool fixed;        /* guess as many as the drafter has, up to n_draft, every step (deterministic) */
} kiln_spec_params;
typedef struct kiln_spec kiln_spec;
typedef struct kiln_spec_stats {
    int64_t steps;    /* target batches */
    int64_t drafted;  /* tokens guessed */
    int64_t accepted; /* guesses the target confirmed */
} kiln_spec_stats;
kiln_spec_params kiln_spec_params_default(void);
kiln_status kiln_spec_create(kiln_ctx *target, const kiln_spec_params *params, kiln_spec **out);
void kiln_spec_destroy(kiln_spec *spec);
/* One step. history[0..n) is sequence 0 so far: the target's cache holds its first n - 1 tokens and
 * history[n - 1] is the last token chosen, not yet decoded. out receives the next 1 .. min(max_out,
 * n_draft + 1) tokens (*n_out of them); the cache then holds the history and every token of out but the
 * last, which is the next step's undecoded token. sampler NULL: greedy decoding (argmax). Otherwise
 * (borrowed) each token is drawn by kiln_sampler_sample_draft (so distributed as kiln_sampler_sample
 * would draw it after the tokens before it; a grammar on the sampler follows each token kept) and
 * passed to kiln_sampler_accept. */
kiln_status kiln_spec_step(kiln_spec *spec, kiln_sampler *sampler, const int32_t *history, int32_t n,
                           int32_t max_out, int32_t *out, int32_t *n_out);
void kiln_spec_get_stats(const kiln_spec *spec, kiln_spec_stats *out);
/* Prompt lookup alone, for callers that build their own batches (kiln serve): what followed the latest
 * earlier occurrence in history[0..n) of its last ngram_max .. ngram_min tokens (longest first), at most
 * max tokens, into draft. Returns how many (0: no match). Verify a guess with kiln_sampler_sample_draft
 * on the logits of the token before it. */
int32_t kiln_spec_lookup(const int32_t *history, int32_t n, int32_t ngram_min, int32_t ngram_max, int32_t max,
                         int32_t *draft);
/* Whether draft can guess for target, for callers that run a draft model in their own batches (kiln
 * serve): the same vocabulary (size, BOS, EOS and every token's text), as kiln_spec_create checks;
 * KILN_E_INVALID_ARG names the first difference. */
kiln_status kiln_spec_check_draft(const kiln_model *target, const kiln_model *draft);

/* What the graph compiler did for batches of n_tokens tokens with n_outputs logits rows (the plan is
 * compiled if needed; both are rounded up to their buckets, and 0 rows compile as 1, as decoding does). */
typedef struct kiln_plan_info {
    int32_t n_tokens;                  /* the bucket */
    int32_t n_outputs;                 /* the bucket */
    int32_t nodes_before, nodes_after; /* executed nodes before and after the passes */
    int32_t rounds;                    /* pipeline rounds until nothing changed */
    int32_t n_passes;
    struct {
        const char *name;
        bool ran;
        int32_t rewrites;
        int32_t nodes_after;
    } passes[16];
    uint64_t naive_bytes;  /* sum of every intermediate's size */
    uint64_t arena_bytes;  /* the planned arena */
    int32_t n_buffers, n_reused, n_inplace;
    uint64_t const_bytes;  /* memory of folded constants held by the model */
    int32_t n_splits;      /* runs of nodes on one backend */
    int32_t n_copies;      /* tensors copied between backends */
    double compile_ms;     /* time the compilation took */
} kiln_plan_info;

kiln_status kiln_ctx_plan_info(kiln_ctx *ctx, int32_t n_tokens, int32_t n_outputs, kiln_plan_info *out);

/* Write the graph for a batch of n_tokens, before the passes (optimized = false) or after, one line per
 * call of write: a text listing, or Graphviz DOT when dot is set. */
kiln_status kiln_ctx_graph_dump(kiln_ctx *ctx, int32_t n_tokens, bool optimized, bool dot,
                                void (*write)(void *user, const char *line), void *user);

/* The default thread count: the number of physical cores (online cores when that cannot be read). */
int32_t kiln_default_threads(void);

/* ---------------------------------------------------------------------------------------------------
 * ONNX models: read, validated and shape-inferred at load (docs/onnx.md). A loaded model answers what it
 * holds; a kiln_onnx_session (below) runs it.
 *
 * A model is a ModelProto (opsets 13 to 21 of the ai.onnx domain) whose every node is one of the
 * operators Kiln claims, with the attributes and types the ONNX specification gives them. Initializers may
 * be inline or in external data files beside the model. Anything else is refused at load with a message
 * naming the field, node, operator type and opset. A kiln_onnx is immutable after load: its getters may be
 * called from any number of threads at once. Every pointer it returns is valid until kiln_onnx_destroy.
 * ------------------------------------------------------------------------------------------------- */

#define KILN_MAX_ONNX_NODES (1u << 20)        /* nodes of a graph */
#define KILN_MAX_ONNX_VALUES (1u << 20)       /* initializers, inputs, outputs or value_info of a graph */
#define KILN_MAX_ONNX_NODE_IO 4096u           /* inputs, or outputs, of one node */
#define KILN_MAX_ONNX_ATTRS 1024u             /* attributes of one node */
#define KILN_MAX_ONNX_LIST (1u << 24)         /* elements of a list attribute */
#define KILN_MAX_ONNX_RANK 16                 /* dimensions of a tensor or a declared shape */
#define KILN_MAX_ONNX_OPSETS 64u              /* opset_import entries */
#define KILN_MAX_ONNX_EXTERNAL_FILES 1024u    /* distinct external data files mapped by one model */

/* Element types, numbered as ONNX's TensorProto.DataType. */
typedef enum kiln_onnx_type {
    KILN_ONNX_UNDEFINED = 0,
    KILN_ONNX_FLOAT = 1,
    KILN_ONNX_UINT8 = 2,
    KILN_ONNX_INT8 = 3,
    KILN_ONNX_UINT16 = 4,
    KILN_ONNX_INT16 = 5,
    KILN_ONNX_INT32 = 6,
    KILN_ONNX_INT64 = 7,
    KILN_ONNX_STRING = 8,
    KILN_ONNX_BOOL = 9,
    KILN_ONNX_FLOAT16 = 10,
    KILN_ONNX_DOUBLE = 11,
    KILN_ONNX_UINT32 = 12,
    KILN_ONNX_UINT64 = 13,
    KILN_ONNX_BFLOAT16 = 16
} kiln_onnx_type;

/* Attribute types, numbered as ONNX's AttributeProto.AttributeType. */
typedef enum kiln_onnx_attr_type {
    KILN_ONNX_ATTR_FLOAT = 1,
    KILN_ONNX_ATTR_INT = 2,
    KILN_ONNX_ATTR_STRING = 3,
    KILN_ONNX_ATTR_TENSOR = 4,
    KILN_ONNX_ATTR_FLOATS = 6,
    KILN_ONNX_ATTR_INTS = 7,
    KILN_ONNX_ATTR_STRINGS = 8
} kiln_onnx_attr_type;

typedef struct kiln_onnx kiln_onnx;

/* One dimension: value >= 0 when known; otherwise -1, with param the symbolic name ("batch") or NULL
 * when nothing is known about it. */
typedef struct kiln_onnx_dim {
    int64_t value;
    const char *param;
} kiln_onnx_dim;

/* A named value's element type and shape (rank -1: unknown; type KILN_ONNX_UNDEFINED: unknown). */
typedef struct kiln_onnx_value_info {
    const char *name;
    kiln_onnx_type type;
    int32_t rank;
    const kiln_onnx_dim *dims; /* rank entries */
} kiln_onnx_value_info;

/* A tensor held by the model (an initializer or an attribute's value). */
typedef struct kiln_onnx_tensor_info {
    const char *name;
    kiln_onnx_type type;
    int32_t rank;
    const int64_t *dims;
    uint64_t n_elements;
    const void *data; /* n_elements little-endian elements, aligned for the type */
    uint64_t size;    /* bytes of data */
    bool external;    /* read from an external data file */
} kiln_onnx_tensor_info;

typedef struct kiln_onnx_node_info {
    const char *name;    /* "" when the file names none */
    const char *op_type; /* "MatMul", ... */
    int32_t n_inputs, n_outputs, n_attrs;
    const char *const *inputs; /* "" for an omitted optional input */
    const char *const *outputs;
} kiln_onnx_node_info;

typedef struct kiln_onnx_attr_info {
    const char *name;
    kiln_onnx_attr_type type;
    int64_t i;              /* INT */
    float f;                /* FLOAT */
    kiln_str s;             /* STRING */
    int64_t n;              /* elements of INTS, FLOATS, STRINGS */
    const int64_t *ints;    /* INTS */
    const float *floats;    /* FLOATS */
    const kiln_str *strings; /* STRINGS */
    kiln_onnx_tensor_info t; /* TENSOR */
} kiln_onnx_attr_info;

/* Load and validate an ONNX model file (mapped read-only). External data files are read from its folder. */
kiln_status kiln_onnx_load(const char *path, kiln_onnx **out);
/* Load a model image already in memory (borrowed: it must outlive the handle). External data is read
 * from the folder dir; with dir NULL a model that refers to external data is refused. */
kiln_status kiln_onnx_load_memory(const void *data, size_t size, const char *dir, kiln_onnx **out);
void kiln_onnx_destroy(kiln_onnx *model);

int64_t kiln_onnx_opset(const kiln_onnx *model);      /* the ai.onnx opset, 13 .. 21 */
int64_t kiln_onnx_ir_version(const kiln_onnx *model);
const char *kiln_onnx_producer(const kiln_onnx *model); /* producer_name, "" when absent */

/* The graph's inputs that a caller feeds (inputs that are also initializers are left out, as onnxruntime
 * does) and its outputs, in file order; KILN_E_RANGE for i out of range. */
int32_t kiln_onnx_input_count(const kiln_onnx *model);
int32_t kiln_onnx_output_count(const kiln_onnx *model);
kiln_status kiln_onnx_input(const kiln_onnx *model, int32_t i, kiln_onnx_value_info *out);
kiln_status kiln_onnx_output(const kiln_onnx *model, int32_t i, kiln_onnx_value_info *out);
/* Any value of the graph by name, with the type and shape inferred at load; KILN_E_NOT_FOUND if absent. */
kiln_status kiln_onnx_value(const kiln_onnx *model, const char *name, kiln_onnx_value_info *out);

/* Nodes in file order, their attributes, and the initializers. */
int32_t kiln_onnx_node_count(const kiln_onnx *model);
kiln_status kiln_onnx_node(const kiln_onnx *model, int32_t i, kiln_onnx_node_info *out);
kiln_status kiln_onnx_node_attr(const kiln_onnx *model, int32_t node, int32_t j, kiln_onnx_attr_info *out);
int32_t kiln_onnx_initializer_count(const kiln_onnx *model);
kiln_status kiln_onnx_initializer(const kiln_onnx *model, int32_t i, kiln_onnx_tensor_info *out);

/* "float", "int64", "bool", ... as ONNX spells them; "undefined" for 0 and values it does not define. */
const char *kiln_onnx_type_name(kiln_onnx_type type);

/* ---- Running ONNX models -------------------------------------------------------------------------
 * A session compiles a loaded model for Kiln's engine (its own threads and devices) and runs it with the
 * caller's buffers. Dynamic dims (a symbolic batch or sequence length) are bound by the input shapes of
 * each run; a plan is compiled once per combination of their values and kept (the least recently used is
 * replaced past n_plans), so a shape seen before runs without compiling and without allocating.
 * What runs (operators, types, ranks, broadcasting) is in docs/onnx.md; a model with anything
 * else is refused by kiln_onnx_session_create or by the first run that compiles it, with a message naming
 * the node and operator. A session borrows its model, which must outlive it. A session is not thread-safe:
 * one run at a time; several sessions of one model may run in parallel.
 * ------------------------------------------------------------------------------------------------- */

typedef struct kiln_onnx_session kiln_onnx_session;

typedef struct kiln_onnx_session_params {
    int32_t n_threads;   /* CPU threads; 0 = kiln_default_threads() */
    const char *devices; /* backends, as kiln_model_params.devices; NULL or "" = "cpu" */
    int32_t n_plans;     /* shapes kept compiled; 0 = 8 */
    /* NULL or "float": weights as the file holds them. "q8_0": Kiln's own INT8 quantization at load: every
     * float 2-D constant that MatMul or Gemm multiplies by (inner dimension a multiple of 32, finite values)
     * is quantized per output channel in blocks of 32 (Q8_0: int8 values, one float16 scale per 32 weights of
     * a channel) and run on the int8 kernels; accuracy in docs/onnx.md. Anything else: KILN_E_INVALID_ARG. */
    const char *weights;
} kiln_onnx_session_params;

/* Defaults: every field zero or NULL. */
kiln_onnx_session_params kiln_onnx_session_params_default(void);

/* A tensor handed to or read from a run: name, element type, shape (ONNX order, outermost first) and
 * bytes. Inputs are read in place during the run (data aligned to 4 bytes, dense, size bytes exactly). */
typedef struct kiln_onnx_buffer {
    const char *name;
    kiln_onnx_type type;
    int32_t rank;
    int64_t shape[KILN_MAX_ONNX_RANK];
    void *data;
    size_t size;
} kiln_onnx_buffer;

/* Bytes per element of a type a session takes or returns (a buffer's size is its element count times
 * this): 4 for FLOAT and INT32, 8 for INT64, 1 for UINT8, INT8 and BOOL; 0 for any other type. */
size_t kiln_onnx_type_size(kiln_onnx_type type);

/* Check that the model can run (input and output types and ranks) and start the engine. params may be
 * NULL (the defaults). Operators are lowered when a shape is first run. */
kiln_status kiln_onnx_session_create(const kiln_onnx *model, const kiln_onnx_session_params *params,
                                     kiln_onnx_session **out);
void kiln_onnx_session_destroy(kiln_onnx_session *session);

/* Run with every input of kiln_onnx_input_count given once, by name, in any order. Errors name the input:
 * an unknown or repeated name, a type, rank or fixed dim that differs from the model's, a dynamic dim bound
 * to two values, a size that is not the shape's. */
kiln_status kiln_onnx_session_run(kiln_onnx_session *session, const kiln_onnx_buffer *inputs, int32_t n_inputs);

/* Output i (kiln_onnx_output's order) of the last run: out gets its name, type, shape and size, and data
 * pointing at the result (valid until the next run or the session's end). When dst is not NULL the result
 * is also copied there; KILN_E_RANGE if it holds fewer than out->size bytes. */
kiln_status kiln_onnx_session_output(const kiln_onnx_session *session, int32_t i, void *dst, size_t dst_size,
                                     kiln_onnx_buffer *out);

/* The Kiln graph the model lowers to for these input shapes (inputs as for kiln_onnx_session_run; only
 * names, types and shapes are read, data may be NULL), one line per tensor as `kiln graph` prints it:
 * as lowered (optimized false) or after the pass pipeline (constants folded, fusions; `kiln onnx inspect
 * --after`). Compiles nothing into the session's plans. */
kiln_status kiln_onnx_session_graph_dump(kiln_onnx_session *session, const kiln_onnx_buffer *inputs, int32_t n_inputs,
                                        bool optimized, void (*write)(void *user, const char *line), void *user);

/* Runs so far, and plans compiled for them (a run of a shape already compiled compiles nothing). */
int64_t kiln_onnx_session_runs(const kiln_onnx_session *session);
int64_t kiln_onnx_session_compiles(const kiln_onnx_session *session);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
