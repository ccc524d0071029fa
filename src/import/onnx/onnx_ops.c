/*
 * onnx_ops.c - the operators Kiln claims (issue 22's list: what torch.onnx.export writes for MLPs,
 * transformer encoders, GPT-2, BERT and Llama/Qwen blocks), each with what the ONNX specification says of
 * it for opsets 13 to 21: the opset it appeared in, its input and output counts, the types its T accepts
 * (of those Kiln computes in: float, int32, int64, bool), where its output type comes from, its shape rule
 * and its attributes with their types and the opsets that have them. One table; validation and shape
 * inference read it, and docs/onnx.md lists it.
 */
#include "import/onnx/onnx_internal.h"

#include <string.h>

#define A_F KILN_ONNX_ATTR_FLOAT
#define A_I KILN_ONNX_ATTR_INT
#define A_S KILN_ONNX_ATTR_STRING
#define A_T KILN_ONNX_ATTR_TENSOR
#define A_FS KILN_ONNX_ATTR_FLOATS
#define A_IS KILN_ONNX_ATTR_INTS
#define A_SS KILN_ONNX_ATTR_STRINGS
#define END                                                                                                  \
    { NULL, 0, 0, 0 }

static const kiln__onnx_attr_spec no_attrs[] = {END};
static const kiln__onnx_attr_spec gemm[] = {
    {"alpha", A_F, 0, 0}, {"beta", A_F, 0, 0}, {"transA", A_I, 0, 0}, {"transB", A_I, 0, 0}, END};
static const kiln__onnx_attr_spec gelu[] = {{"approximate", A_S, 0, 0}, END};
static const kiln__onnx_attr_spec axis[] = {{"axis", A_I, 0, 0}, END};
static const kiln__onnx_attr_spec layer_norm[] = {
    {"axis", A_I, 0, 0}, {"epsilon", A_F, 0, 0}, {"stash_type", A_I, 0, 0}, END};
/* ReduceMean and ReduceMax took axes as an attribute until opset 17, an input from 18 (ReduceSum from 13). */
static const kiln__onnx_attr_spec reduce_attr_axes[] = {
    {"axes", A_IS, 0, 17}, {"keepdims", A_I, 0, 0}, {"noop_with_empty_axes", A_I, 18, 0}, END};
static const kiln__onnx_attr_spec reduce_sum[] = {
    {"keepdims", A_I, 0, 0}, {"noop_with_empty_axes", A_I, 0, 0}, END};
static const kiln__onnx_attr_spec transpose[] = {{"perm", A_IS, 0, 0}, END};
static const kiln__onnx_attr_spec reshape[] = {{"allowzero", A_I, 14, 0}, END};
static const kiln__onnx_attr_spec split[] = {{"axis", A_I, 0, 0}, {"num_outputs", A_I, 18, 0}, END};
static const kiln__onnx_attr_spec cast[] = {{"to", A_I, 0, 0}, {"saturate", A_I, 19, 0}, END};
static const kiln__onnx_attr_spec shape[] = {{"start", A_I, 15, 0}, {"end", A_I, 15, 0}, END};
static const kiln__onnx_attr_spec constant_of_shape[] = {{"value", A_T, 0, 0}, END};
static const kiln__onnx_attr_spec constant[] = {{"value", A_T, 0, 0},          {"value_float", A_F, 0, 0},
                                                {"value_floats", A_FS, 0, 0},  {"value_int", A_I, 0, 0},
                                                {"value_ints", A_IS, 0, 0},    {"value_string", A_S, 0, 0},
                                                {"value_strings", A_SS, 0, 0}, END};
static const kiln__onnx_attr_spec trilu[] = {{"upper", A_I, 0, 0}, END};
static const kiln__onnx_attr_spec mod[] = {{"fmod", A_I, 0, 0}, END};
static const kiln__onnx_attr_spec gather_nd[] = {{"batch_dims", A_I, 0, 0}, END};
static const kiln__onnx_attr_spec quantize[] = {{"axis", A_I, 0, 0}, {"saturate", A_I, 19, 0}, END};

#define F KILN__T_FLOAT
#define N KILN__T_NUM
#define B KILN__T_BOOL
#define ANY KILN__T_ANY
#define I KILN__T_INT

/* name, since (the first opset that has the operator; 0: before 13), inputs min..max, outputs min..max, T,
 * output type from input (-1: fixed), fixed type, shape, attrs */
static const kiln__onnx_op ops[] = {
    {"MatMul", 0, 2, 2, 1, 1, N, 0, 0, KILN__SHAPE_MATMUL, no_attrs},
    {"Gemm", 0, 2, 3, 1, 1, N, 0, 0, KILN__SHAPE_GEMM, gemm},
    {"Add", 0, 2, 2, 1, 1, N, 0, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Sub", 0, 2, 2, 1, 1, N, 0, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Mul", 0, 2, 2, 1, 1, N, 0, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Div", 0, 2, 2, 1, 1, N, 0, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Pow", 0, 2, 2, 1, 1, N, 0, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Sqrt", 0, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Reciprocal", 0, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Neg", 0, 1, 1, 1, 1, N, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Exp", 0, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Log", 0, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Tanh", 0, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Erf", 0, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Relu", 0, 1, 1, 1, 1, N, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Gelu", 20, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, gelu},
    {"Sigmoid", 0, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Softmax", 0, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, axis},
    {"LayerNormalization", 17, 2, 3, 1, 3, F, 0, 0, KILN__SHAPE_LAYER_NORM, layer_norm},
    {"ReduceMean", 0, 1, 2, 1, 1, N, 0, 0, KILN__SHAPE_REDUCE, reduce_attr_axes},
    {"ReduceSum", 0, 1, 2, 1, 1, N, 0, 0, KILN__SHAPE_REDUCE, reduce_sum},
    {"ReduceMax", 0, 1, 2, 1, 1, N, 0, 0, KILN__SHAPE_REDUCE, reduce_attr_axes},
    {"Transpose", 0, 1, 1, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_TRANSPOSE, transpose},
    {"Reshape", 0, 2, 2, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_RESHAPE, reshape},
    {"Flatten", 0, 1, 1, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_FLATTEN, axis},
    {"Squeeze", 0, 1, 2, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_SQUEEZE, no_attrs},
    {"Unsqueeze", 0, 2, 2, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_UNSQUEEZE, no_attrs},
    {"Concat", 0, 1, 127, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_CONCAT, axis},
    {"Split", 0, 1, 2, 1, 127, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_SPLIT, split},
    {"Slice", 0, 3, 5, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_SLICE, no_attrs},
    {"Gather", 0, 2, 2, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_GATHER, axis},
    {"GatherElements", 0, 2, 2, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_GATHER_ELEMENTS, axis},
    {"Expand", 0, 2, 2, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_EXPAND, no_attrs},
    {"Where", 0, 3, 3, 1, 1, B, 1, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Equal", 0, 2, 2, 1, 1, ANY, -1, KILN_ONNX_BOOL, KILN__SHAPE_BROADCAST, no_attrs},
    {"Greater", 0, 2, 2, 1, 1, N, -1, KILN_ONNX_BOOL, KILN__SHAPE_BROADCAST, no_attrs},
    {"GreaterOrEqual", 0, 2, 2, 1, 1, N, -1, KILN_ONNX_BOOL, KILN__SHAPE_BROADCAST, no_attrs},
    {"Less", 0, 2, 2, 1, 1, N, -1, KILN_ONNX_BOOL, KILN__SHAPE_BROADCAST, no_attrs},
    {"LessOrEqual", 0, 2, 2, 1, 1, N, -1, KILN_ONNX_BOOL, KILN__SHAPE_BROADCAST, no_attrs},
    {"And", 0, 2, 2, 1, 1, B, 0, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Or", 0, 2, 2, 1, 1, B, 0, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Xor", 0, 2, 2, 1, 1, B, 0, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Not", 0, 1, 1, 1, 1, B, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"IsNaN", 0, 1, 1, 1, 1, F, -1, KILN_ONNX_BOOL, KILN__SHAPE_SAME, no_attrs},
    {"Cast", 0, 1, 1, 1, 1, ANY, -1, 0, KILN__SHAPE_SAME, cast},
    {"Shape", 0, 1, 1, 1, 1, ANY, -1, KILN_ONNX_INT64, KILN__SHAPE_SHAPE, shape},
    {"ConstantOfShape", 0, 1, 1, 1, 1, I, -1, 0, KILN__SHAPE_CONSTANT_OF_SHAPE, constant_of_shape},
    {"Range", 0, 3, 3, 1, 1, N, 0, 0, KILN__SHAPE_RANGE, no_attrs},
    {"Constant", 0, 0, 0, 1, 1, ANY, -1, 0, KILN__SHAPE_CONSTANT, constant},
    {"Identity", 0, 1, 1, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Trilu", 14, 1, 2, 1, 1, ANY, 0, 0, KILN__SHAPE_SAME, trilu},
    {"Mod", 0, 2, 2, 1, 1, N, 0, 0, KILN__SHAPE_BROADCAST, mod},
    {"Max", 0, 1, 127, 1, 1, N, 0, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Min", 0, 1, 127, 1, 1, N, 0, 0, KILN__SHAPE_BROADCAST, no_attrs},
    {"Abs", 0, 1, 1, 1, 1, N, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Sin", 0, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"Cos", 0, 1, 1, 1, 1, F, 0, 0, KILN__SHAPE_SAME, no_attrs},
    {"GatherND", 0, 2, 2, 1, 1, ANY | KILN__T_Q8, 0, 0, KILN__SHAPE_GATHER_ND, gather_nd},
    /* Q/DQ INT8, as onnxruntime's quantize_dynamic and quantize_static write it (per tensor, per channel). */
    {"QuantizeLinear", 13, 2, 3, 1, 1, F, -1, KILN_ONNX_UINT8, KILN__SHAPE_SAME, quantize},
    {"DequantizeLinear", 13, 2, 3, 1, 1, KILN__T_Q8 | KILN__TBIT(6), 1, 0, KILN__SHAPE_SAME, quantize},
    {"DynamicQuantizeLinear", 0, 1, 1, 3, 3, F, -1, KILN_ONNX_UINT8, KILN__SHAPE_DYNAMIC_QUANTIZE, no_attrs},
    {"MatMulInteger", 0, 2, 4, 1, 1, KILN__T_Q8, -1, KILN_ONNX_INT32, KILN__SHAPE_MATMUL, no_attrs},
    {"QLinearMatMul", 0, 8, 8, 1, 1, KILN__T_Q8, 7, 0, KILN__SHAPE_MATMUL, no_attrs},
};

const kiln__onnx_op *kiln__onnx_op_find(const char *op_type) {
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(ops[i].name, op_type)) return &ops[i];
    return NULL;
}

const kiln__onnx_op *kiln__onnx_ops(int32_t *count) {
    *count = (int32_t)(sizeof ops / sizeof ops[0]);
    return ops;
}

static const char *const type_names[] = {
    "undefined",      "float",      "uint8",          "int8",       "uint16",    "int16",
    "int32",          "int64",      "string",         "bool",       "float16",   "double",
    "uint32",         "uint64",     "complex64",      "complex128", "bfloat16",  "float8e4m3fn",
    "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4",      "int4",      "float4e2m1",
    "float8e8m0",     "uint2",      "int2",           "float6e2m3", "float6e3m2"};

const char *kiln__onnx_type_name(int32_t type) {
    if (type < 0 || type >= (int32_t)(sizeof type_names / sizeof type_names[0])) return "undefined";
    return type_names[type];
}

const char *kiln__onnx_attr_type_name(int32_t type) {
    static const char *const names[] = {"UNDEFINED",      "FLOAT",      "INT",        "STRING",
                                        "TENSOR",         "GRAPH",      "FLOATS",     "INTS",
                                        "STRINGS",        "TENSORS",    "GRAPHS",     "SPARSE_TENSOR",
                                        "SPARSE_TENSORS", "TYPE_PROTO", "TYPE_PROTOS"};
    if (type < 0 || type >= (int32_t)(sizeof names / sizeof names[0])) return "UNDEFINED";
    return names[type];
}

const char *kiln_onnx_type_name(kiln_onnx_type type) {
    return kiln__onnx_type_name((int32_t)type);
}
