/*
 * onnx_internal.h - what the ONNX reader's files share: the protobuf wire cursor (onnx_wire.c), the
 * in-memory model that the decoder (onnx_parse.c, onnx_tensor.c) builds in one arena, the external-data
 * resolver (onnx_external.c), the operator table (onnx_ops.c), the load-time checks (onnx_validate.c),
 * static shape inference (onnx_shape.c) and the folding of shape subgraphs (onnx_fold.c).
 *
 * Lifetime: every name, table and copied tensor lives in the model's arena; tensor data that is aligned in
 * the image (or in an external file's mapping) is used in place. Everything dies with kiln_onnx_destroy.
 * The format as Kiln reads it and every rule are described in docs/onnx.md.
 */
#ifndef KILN_ONNX_INTERNAL_H
#define KILN_ONNX_INTERNAL_H

#include "kiln.h"

#include "gguf/gguf_internal.h" /* the chunked arena and the name index, shared with the GGUF reader */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- Protobuf wire format (onnx_wire.c). ---- */

enum { KILN__PB_VARINT = 0, KILN__PB_I64 = 1, KILN__PB_LEN = 2, KILN__PB_I32 = 5 };

/* A message's bytes. `at` is the byte offset of base in the whole image, for error messages. */
typedef struct kiln__pb {
    const uint8_t *base;
    size_t size, pos, at;
} kiln__pb;

/* One field: its number and wire type; a VARINT, I64 or I32 value in v; a LEN field's bytes in data/len.
 * `at` is the field's byte offset in the image. */
typedef struct kiln__pb_field {
    uint32_t number, wire;
    uint64_t v;
    const uint8_t *data;
    size_t len, at;
} kiln__pb_field;

/* The next field of the message `what` (for errors), or *done when the message ends. Rejects bad varints
 * (over 10 bytes, or a 10th byte above 1), field number 0, group wire types and lengths past the end. */
kiln_status kiln__pb_next(kiln__pb *c, const char *what, kiln__pb_field *f, bool *done);
/* The cursor over a LEN field's bytes. */
kiln__pb kiln__pb_sub(const kiln__pb_field *f);
/* Fields numbered `number` in the message (a first walk, before allocating for them). */
kiln_status kiln__pb_count(kiln__pb c, const char *what, uint32_t number, int64_t *n);
/* Elements of a repeated scalar field whose items have wire type `wire` (VARINT, I32 or I64), packed or
 * not: elements in f (counts only; packed VARINT counts its terminal bytes). */
kiln_status kiln__pb_packed_count(const kiln__pb_field *f, uint32_t wire, const char *what, int64_t *n);
/* Append the elements of f to out[*n..] as 64-bit values (I32 zero-extended), at most cap in all. */
kiln_status kiln__pb_packed_read(const kiln__pb_field *f, uint32_t wire, const char *what, uint64_t *out,
                                 int64_t cap, int64_t *n);
/* The field must have wire type `wire`; a named error otherwise. */
kiln_status kiln__pb_expect(const kiln__pb_field *f, uint32_t wire, const char *what, const char *field);
/* A VARINT field as int64 / as int32 (the 10-byte sign-extended form of negative int32 accepted). */
kiln_status kiln__pb_int32(const kiln__pb_field *f, const char *what, const char *field, int32_t *out);

/* ---- The model. ---- */

typedef struct kiln__onnx_tensor {
    const char *name;
    int32_t type; /* TensorProto.DataType */
    int32_t rank;
    int64_t *dims;
    uint64_t n_elements;
    const void *data; /* little-endian elements, aligned for the type; never NULL */
    uint64_t size;    /* bytes */
    bool external;
} kiln__onnx_tensor;

typedef struct kiln__onnx_attr {
    const char *name;
    int32_t type; /* AttributeProto.AttributeType */
    int64_t i;
    float f;
    kiln_str s;
    kiln__onnx_tensor *t;
    int64_t n; /* elements of FLOATS, INTS, STRINGS (and the count of TENSORS, GRAPHS, ...) */
    int64_t *ints;
    float *floats;
    kiln_str *strings;
} kiln__onnx_attr;

struct kiln__onnx_op;

typedef struct kiln__onnx_node {
    const char *name; /* "" when the file gives none */
    const char *op_type, *domain;
    int32_t n_inputs, n_outputs, n_attrs;
    const char **inputs; /* "" for an omitted optional input */
    const char **outputs;
    kiln__onnx_attr *attrs;
    const struct kiln__onnx_op *op; /* set by validation */
} kiln__onnx_node;

/* A value's type and shape: rank -1 when unknown; dims[d].value -1 when not a number (param names a
 * symbolic dimension, or is NULL when nothing is known). */
typedef struct kiln__onnx_vinfo {
    const char *name;
    int32_t type; /* 0 when unknown */
    int32_t rank;
    kiln_onnx_dim *dims;
    bool tensor; /* false: a sequence, map, optional or sparse type */
} kiln__onnx_vinfo;

/* Every value name of the graph after validation: where it comes from, its inferred type and shape. */
typedef struct kiln__onnx_value {
    kiln__onnx_vinfo info;
    int32_t producer;              /* node index, or -1 for a graph input or an initializer */
    const kiln__onnx_tensor *init; /* the initializer, or a Constant node's value tensor */
} kiln__onnx_value;

typedef struct kiln__onnx_map {
    void *base;
    size_t size;
    struct kiln__onnx_map *next;
} kiln__onnx_map;

struct kiln_onnx {
    const uint8_t *base; /* the image */
    size_t size;
    void *map; /* the model file's mapping, NULL for a borrowed buffer */
    size_t map_size;
    const char *dir;          /* folder for external data, NULL when none may be read */
    kiln__onnx_map *ext_maps; /* mappings of external data files */
    kiln__gguf_arena arena;

    int64_t ir_version;
    int64_t opset; /* the ai.onnx opset */
    const char *producer, *producer_version, *graph_name;

    kiln__onnx_node *nodes;
    int32_t n_nodes;
    kiln__onnx_tensor *inits;
    int32_t n_inits;
    kiln__onnx_vinfo *inputs, *outputs, *vinfos; /* as declared in the file (vinfos: value_info) */
    int32_t n_inputs, n_outputs, n_vinfos;
    int32_t *feed; /* indexes into inputs of the inputs without an initializer (what a caller feeds) */
    int32_t n_feed;

    kiln__onnx_value *values; /* after validation: one per value name */
    int32_t n_values;
    kiln__gguf_index value_index; /* name -> index in values */
    int32_t *order;               /* node indexes in a topological order */
};

/* ---- Decoding (onnx_parse.c, onnx_tensor.c). ---- */

kiln_status kiln__onnx_parse(kiln_onnx *m);
/* Decode a TensorProto into t, data resolved (external data through m->dir). */
kiln_status kiln__onnx_parse_tensor(kiln_onnx *m, kiln__pb c, kiln__onnx_tensor *t, const char *what);
/* Bytes of one element, or 0 for STRING and types Kiln does not store; sub-byte types report 1 and set
 * *half (two elements per byte). */
size_t kiln__onnx_type_size(int32_t type, bool *half);
/* Arena copies, failing with a named out-of-memory status. */
void *kiln__onnx_alloc(kiln_onnx *m, size_t n, size_t size, const char *what);
kiln_status kiln__onnx_strdup(kiln_onnx *m, const uint8_t *s, size_t len, const char *what, const char **out);

/* ---- External data (onnx_external.c). ---- */

/* The bytes [offset, offset + length) of the file `location` beside the model (length UINT64_MAX: to the
 * end of the file). The path must be relative, without "..", and resolve inside m->dir. */
kiln_status kiln__onnx_external(kiln_onnx *m, const char *tensor, const char *location, uint64_t offset,
                                uint64_t length, const uint8_t **data, uint64_t *size);
void kiln__onnx_external_free(kiln_onnx *m);
/* Hand the pages of the model's file mapping and of its external data files back to the kernel (a session
 * calls it after a new plan's first run: by then the weights it reads are folded, packed or uploaded
 * copies). The
 * mappings are private and read-only, so a later read faults its page in again from the file; a model read
 * from a caller's buffer is left alone. */
void kiln__onnx_release_pages(const kiln_onnx *m);

/* ---- Operators (onnx_ops.c). ---- */

typedef struct kiln__onnx_attr_spec {
    const char *name;
    int32_t type;  /* AttributeProto.AttributeType */
    int16_t since; /* the first opset that has it (0: all) */
    int16_t until; /* the last opset that has it (0: still there) */
} kiln__onnx_attr_spec;

enum kiln__onnx_shape_rule {
    KILN__SHAPE_SAME,      /* output 0 as input 0 */
    KILN__SHAPE_BROADCAST, /* numpy broadcasting of every input */
    KILN__SHAPE_MATMUL,
    KILN__SHAPE_GEMM,
    KILN__SHAPE_REDUCE,
    KILN__SHAPE_TRANSPOSE,
    KILN__SHAPE_RESHAPE,
    KILN__SHAPE_FLATTEN,
    KILN__SHAPE_SQUEEZE,
    KILN__SHAPE_UNSQUEEZE,
    KILN__SHAPE_CONCAT,
    KILN__SHAPE_SPLIT,
    KILN__SHAPE_SLICE,
    KILN__SHAPE_GATHER,
    KILN__SHAPE_GATHER_ELEMENTS,
    KILN__SHAPE_GATHER_ND,
    KILN__SHAPE_DYNAMIC_QUANTIZE, /* y as x (uint8), y_scale (float) and y_zero_point (uint8) scalars */
    KILN__SHAPE_EXPAND,
    KILN__SHAPE_SHAPE,
    KILN__SHAPE_CONSTANT_OF_SHAPE,
    KILN__SHAPE_RANGE,
    KILN__SHAPE_CONSTANT,
    KILN__SHAPE_LAYER_NORM,
};

/* Type sets, as bit masks over TensorProto.DataType. */
#define KILN__TBIT(t) (1u << (t))
#define KILN__T_FLOAT KILN__TBIT(1)
#define KILN__T_INT (KILN__TBIT(6) | KILN__TBIT(7))
#define KILN__T_BOOL KILN__TBIT(9)
#define KILN__T_NUM (KILN__T_FLOAT | KILN__T_INT)
#define KILN__T_ANY (KILN__T_NUM | KILN__T_BOOL)
#define KILN__T_Q8 (KILN__TBIT(2) | KILN__TBIT(3)) /* uint8, int8: quantized tensors (Q/DQ, MatMulInteger) */

/* How the output type follows: as input `type_from`, or a fixed type. */
typedef struct kiln__onnx_op {
    const char *name;
    int16_t since; /* the first ai.onnx opset with this operator's current form */
    int8_t min_in, max_in, min_out, max_out;
    uint32_t types;   /* what input 0 (the T of the spec) may be */
    int8_t type_from; /* the input whose type the outputs take; -1: fixed_type or the rule's own */
    int32_t fixed_type;
    enum kiln__onnx_shape_rule shape;
    const kiln__onnx_attr_spec *attrs;
} kiln__onnx_op;

/* The operator, or NULL when Kiln does not claim it. */
const kiln__onnx_op *kiln__onnx_op_find(const char *op_type);
/* The claimed operators, in the order of docs/onnx.md. */
const kiln__onnx_op *kiln__onnx_ops(int32_t *count);
/* "float", "int64", ... ("undefined" for 0, "type N" beyond the list: a static per-thread buffer). */
const char *kiln__onnx_type_name(int32_t type);
const char *kiln__onnx_attr_type_name(int32_t type);

/* ---- Validation and shapes (onnx_validate.c, onnx_shape.c). ---- */

kiln_status kiln__onnx_validate(kiln_onnx *m);
/* The attribute named name of node n, or NULL. */
const kiln__onnx_attr *kiln__onnx_find_attr(const kiln__onnx_node *n, const char *name);
/* The value named name, or NULL. */
kiln__onnx_value *kiln__onnx_value_find(const kiln_onnx *m, const char *name);
/* Infer node n's output types and shapes from its inputs' (every input already has a value entry). */
kiln_status kiln__onnx_infer(kiln_onnx *m, const kiln__onnx_node *n);
/* After inference: make node n's output a constant when its inputs are and it computes shapes (onnx_fold.c).
 */
kiln_status kiln__onnx_fold(kiln_onnx *m, const kiln__onnx_node *n);

#endif /* KILN_ONNX_INTERNAL_H */
