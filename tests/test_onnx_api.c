/*
 * test_onnx_api.c - the C API of the ONNX reader on a model written here byte by byte (protobuf wire format,
 * field numbers from onnx.proto): what a load gives back, how the getters refuse bad arguments, that every
 * allocation failure during a load is a named out-of-memory status with nothing leaked, and a few malformed
 * inputs with their messages. The comparisons against the onnx package itself, the malformed-file corpus
 * and the backend node tests are in tests/onnx (Python, the `onnx` CTest test); this file is what the
 * sanitizer build runs.
 */
#include "harness.h"
#include "onnx_craft.h"

#include <stdlib.h>

static const float weights[6] = {1.0f, -2.0f, 0.5f, 3.0f, 0.25f, -1.0f};

/* y = MatMul(x [batch, 3], w [3, 2]) with opset 17 and IR version 8. */
static buf matmul_model(void) {
    buf model = {{0}, 0}, graph = {{0}, 0}, node = {{0}, 0}, init = {{0}, 0}, opset = {{0}, 0};
    int64_t x_dims[2] = {-1, 3}, y_dims[2] = {-1, 2};
    put_str(&node, 1, "x");
    put_str(&node, 1, "w");
    put_str(&node, 2, "y");
    put_str(&node, 3, "mm");
    put_str(&node, 4, "MatMul");
    put_int(&init, 1, 3);
    put_int(&init, 1, 2);
    put_int(&init, 2, 1);
    put_str(&init, 8, "w");
    put_bytes(&init, 9, weights, sizeof weights);
    put_msg(&graph, 1, &node);
    put_str(&graph, 2, "g");
    put_msg(&graph, 5, &init);
    put_value_info(&graph, 11, "x", x_dims, 2);
    put_value_info(&graph, 12, "y", y_dims, 2);
    put_int(&opset, 2, 17);
    put_int(&model, 1, 8);
    put_str(&model, 2, "test_onnx_api");
    put_msg(&model, 7, &graph);
    put_msg(&model, 8, &opset);
    return model;
}

static void loads_a_matmul_written_byte_by_byte(void) {
    buf b = matmul_model();
    kiln_onnx *m = NULL;
    kiln_onnx_value_info v;
    kiln_onnx_tensor_info t;
    kiln_onnx_node_info n;
    CHECK_OK(kiln_onnx_load_memory(b.b, b.n, NULL, &m));
    if (!m) return;
    CHECK_EQ_INT(kiln_onnx_opset(m), 17);
    CHECK_EQ_INT(kiln_onnx_ir_version(m), 8);
    CHECK_STR(kiln_onnx_producer(m), "test_onnx_api");
    CHECK_EQ_INT(kiln_onnx_input_count(m), 1);
    CHECK_OK(kiln_onnx_input(m, 0, &v));
    CHECK_STR(v.name, "x");
    CHECK_EQ_INT(v.type, KILN_ONNX_FLOAT);
    CHECK_EQ_INT(v.rank, 2);
    CHECK_EQ_INT(v.dims[0].value, -1);
    CHECK_STR(v.dims[0].param, "batch");
    CHECK_EQ_INT(v.dims[1].value, 3);
    CHECK_OK(kiln_onnx_output(m, 0, &v));
    CHECK_STR(v.name, "y");
    CHECK_STR(v.dims[0].param, "batch");
    CHECK_EQ_INT(v.dims[1].value, 2);
    CHECK_OK(kiln_onnx_initializer(m, 0, &t));
    CHECK_STR(t.name, "w");
    CHECK_EQ_INT(t.rank, 2);
    CHECK_EQ_INT(t.n_elements, 6);
    CHECK_EQ_INT(t.size, sizeof weights);
    CHECK(memcmp(t.data, weights, sizeof weights) == 0);
    CHECK(!t.external);
    CHECK_OK(kiln_onnx_node(m, 0, &n));
    CHECK_STR(n.name, "mm");
    CHECK_STR(n.op_type, "MatMul");
    CHECK_EQ_INT(n.n_inputs, 2);
    CHECK_STR(n.inputs[1], "w");
    CHECK_STR(kiln_onnx_type_name(KILN_ONNX_INT64), "int64");
    CHECK_STR(kiln_onnx_type_name((kiln_onnx_type)99), "undefined");
    /* element sizes of what a session feeds and returns; 0 for what it refuses */
    CHECK_EQ_INT(kiln_onnx_type_size(KILN_ONNX_FLOAT), 4);
    CHECK_EQ_INT(kiln_onnx_type_size(KILN_ONNX_INT32), 4);
    CHECK_EQ_INT(kiln_onnx_type_size(KILN_ONNX_INT64), 8);
    CHECK_EQ_INT(kiln_onnx_type_size(KILN_ONNX_UINT8), 1);
    CHECK_EQ_INT(kiln_onnx_type_size(KILN_ONNX_INT8), 1);
    CHECK_EQ_INT(kiln_onnx_type_size(KILN_ONNX_BOOL), 1);
    CHECK_EQ_INT(kiln_onnx_type_size(KILN_ONNX_DOUBLE), 0);
    CHECK_EQ_INT(kiln_onnx_type_size(KILN_ONNX_FLOAT16), 0);
    CHECK_EQ_INT(kiln_onnx_type_size((kiln_onnx_type)99), 0);
    kiln_onnx_destroy(m);
}

static void getters_refuse_bad_arguments(void) {
    buf b = matmul_model();
    kiln_onnx *m = NULL;
    kiln_onnx_value_info v;
    kiln_onnx_attr_info a;
    CHECK_STATUS(kiln_onnx_load_memory(b.b, b.n, NULL, NULL), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_onnx_load_memory(NULL, 4, NULL, &m), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_onnx_load(NULL, &m), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_onnx_load(KILN_TEST_TMP "/no-such-model.onnx", &m), KILN_E_IO);
    CHECK_ERROR_MENTIONS("no-such-model.onnx");
    CHECK_OK(kiln_onnx_load_memory(b.b, b.n, NULL, &m));
    if (!m) return;
    CHECK_STATUS(kiln_onnx_input(m, 1, &v), KILN_E_RANGE);
    CHECK_STATUS(kiln_onnx_output(m, -1, &v), KILN_E_RANGE);
    CHECK_STATUS(kiln_onnx_input(m, 0, NULL), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_onnx_node_attr(m, 0, 0, &a), KILN_E_RANGE);
    CHECK_STATUS(kiln_onnx_value(m, "nowhere", &v), KILN_E_NOT_FOUND);
    CHECK_ERROR_MENTIONS("'nowhere'");
    kiln_onnx_destroy(m);
    kiln_onnx_destroy(NULL);
}

static void malformed_bytes_are_named_errors(void) {
    buf b = matmul_model();
    kiln_onnx *m = (kiln_onnx *)&b;
    static const uint8_t bad_varint[11] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    CHECK_STATUS(kiln_onnx_load_memory(bad_varint, sizeof bad_varint, NULL, &m), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("bad varint");
    CHECK(m == NULL);
    for (size_t n = 0; n < b.n; n++) {
        CHECK(kiln_onnx_load_memory(b.b, n, NULL, &m) != KILN_OK);
        CHECK(kiln_last_error()[0] != '\0');
    }
    b.b[b.n - 1] = 12; /* the opset version, the model's last byte */
    CHECK_STATUS(kiln_onnx_load_memory(b.b, b.n, NULL, &m), KILN_E_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("opset 12 is not supported");
}

static buf swept_model;
static kiln_onnx *swept;

static kiln_status load_swept(void *user) {
    (void)user;
    return kiln_onnx_load_memory(swept_model.b, swept_model.n, NULL, &swept);
}

static void destroy_swept(void *user) {
    (void)user;
    kiln_onnx_destroy(swept);
    swept = NULL;
}

static void every_allocation_failure_while_loading_is_reported_as_nomem(void) {
    harness_sweep sw = {"kiln_onnx_load_memory", NULL, load_swept, destroy_swept, NULL};
    swept_model = matmul_model();
    CHECK(harness_alloc_sweep(&sw) >= 2);
}

int main(void) {
    RUN(loads_a_matmul_written_byte_by_byte);
    RUN(getters_refuse_bad_arguments);
    RUN(malformed_bytes_are_named_errors);
    RUN(every_allocation_failure_while_loading_is_reported_as_nomem);
    return harness_finish();
}
