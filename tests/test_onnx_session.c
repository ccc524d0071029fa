/*
 * test_onnx_session.c - kiln_onnx_session on a model written here byte by byte: y = Relu(x . W + b) with
 * x [batch, 3], W [3, 2], b [2]. Results at two batch sizes against the same product in double (float
 * sums of 3 terms: within 1e-6); a warmed-up run allocates nothing and compiles nothing; every refusal of a
 * run or an output read is a named error; every allocation failure while a session is made and first run
 * is KILN_E_NOMEM with nothing leaked. The comparisons against onnxruntime are in tests/onnx
 * (test_onnx_run.py); this file is what the sanitizer build runs.
 */
#include "harness.h"
#include "import/onnx/onnx_internal.h"
#include "onnx_craft.h"

#include <math.h>

static const float W[6] = {1.0f, -2.0f, 0.5f, 3.0f, 0.25f, -1.0f}; /* [3, 2], row-major */
static const float B[2] = {0.5f, -0.25f};

static void put_init(buf *graph, const char *name, const int64_t *dims, int rank, const float *data, size_t n) {
    buf init = {{0}, 0};
    for (int d = 0; d < rank; d++) put_int(&init, 1, (uint64_t)dims[d]);
    put_int(&init, 2, 1); /* FLOAT */
    put_str(&init, 8, name);
    put_bytes(&init, 9, data, n * sizeof(float));
    put_msg(graph, 5, &init);
}

static void put_node(buf *graph, const char *op, const char *a, const char *b, const char *out) {
    buf node = {{0}, 0};
    put_str(&node, 1, a);
    if (b) put_str(&node, 1, b);
    put_str(&node, 2, out);
    put_str(&node, 3, out);
    put_str(&node, 4, op);
    put_msg(graph, 1, &node);
}

static kiln_onnx *load_mlp(void) {
    buf model = {{0}, 0}, graph = {{0}, 0}, opset = {{0}, 0};
    int64_t x_dims[2] = {-1, 3}, y_dims[2] = {-1, 2}, w_dims[2] = {3, 2}, b_dims[1] = {2};
    static buf image;
    kiln_onnx *m = NULL;
    put_node(&graph, "MatMul", "x", "w", "xw");
    put_node(&graph, "Add", "xw", "b", "h");
    put_node(&graph, "Relu", "h", NULL, "y");
    put_str(&graph, 2, "mlp");
    put_init(&graph, "w", w_dims, 2, W, 6);
    put_init(&graph, "b", b_dims, 1, B, 2);
    put_value_info(&graph, 11, "x", x_dims, 2);
    put_value_info(&graph, 12, "y", y_dims, 2);
    put_int(&opset, 2, 17);
    put_int(&model, 1, 8);
    put_msg(&model, 7, &graph);
    put_msg(&model, 8, &opset);
    image = model;
    CHECK_OK(kiln_onnx_load_memory(image.b, image.n, NULL, &m));
    return m;
}

static kiln_onnx_buffer input(const char *name, int64_t batch, float *x) {
    kiln_onnx_buffer b;
    memset(&b, 0, sizeof b);
    b.name = name;
    b.type = KILN_ONNX_FLOAT;
    b.rank = 2;
    b.shape[0] = batch;
    b.shape[1] = 3;
    b.data = x;
    b.size = (size_t)batch * 3 * sizeof(float);
    return b;
}

static void run_and_check(kiln_onnx_session *s, int64_t batch) {
    float x[8 * 3], y[8 * 2];
    kiln_onnx_buffer in = input("x", batch, x), out;
    for (int i = 0; i < batch * 3; i++) x[i] = (float)((i * 7) % 11) * 0.25f - 1.0f;
    CHECK_OK(kiln_onnx_session_run(s, &in, 1));
    CHECK_OK(kiln_onnx_session_output(s, 0, y, sizeof y, &out));
    CHECK_STR(out.name, "y");
    CHECK_EQ_INT(out.rank, 2);
    CHECK_EQ_INT(out.shape[0], batch);
    CHECK_EQ_INT(out.shape[1], 2);
    CHECK_EQ_INT(out.size, (size_t)batch * 2 * sizeof(float));
    for (int m = 0; m < batch; m++)
        for (int n = 0; n < 2; n++) {
            double ref = B[n];
            for (int k = 0; k < 3; k++) ref += (double)x[m * 3 + k] * W[k * 2 + n];
            CHECK_NEAR(y[m * 2 + n], ref > 0 ? ref : 0.0, 1e-6);
        }
}

static void runs_at_each_batch_size_and_a_warm_run_allocates_nothing(void) {
    kiln_onnx *m = load_mlp();
    kiln_onnx_session *s = NULL;
    kiln_onnx_session_params p = kiln_onnx_session_params_default();
    p.n_threads = 2;
    if (!m) return;
    CHECK_OK(kiln_onnx_session_create(m, &p, &s));
    if (s) {
        run_and_check(s, 2);
        run_and_check(s, 5);
        harness_count_allocations();
        harness_zero_allocations();
        run_and_check(s, 2);
        run_and_check(s, 5);
        if (harness_allocations() != 0)
            harness_fail(__FILE__, __LINE__, "%ld allocations in warmed-up runs", harness_allocations());
        kiln_set_allocator(NULL);
        CHECK_EQ_INT(kiln_onnx_session_runs(s), 4);
        CHECK_EQ_INT(kiln_onnx_session_compiles(s), 2);
    }
    kiln_onnx_session_destroy(s);
    kiln_onnx_destroy(m);
}

static void bad_runs_and_reads_are_named_errors(void) {
    kiln_onnx *m = load_mlp();
    kiln_onnx_session *s = NULL;
    float x[4 * 3] = {0}, y[2];
    kiln_onnx_buffer in[2], out;
    if (!m) return;
    CHECK_OK(kiln_onnx_session_create(m, NULL, &s));
    if (!s) goto done;
    CHECK_STATUS(kiln_onnx_session_output(s, 0, NULL, 0, &out), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("no successful run");
    in[0] = input("q", 2, x);
    CHECK_STATUS(kiln_onnx_session_run(s, in, 1), KILN_E_NOT_FOUND);
    CHECK_ERROR_MENTIONS("input 'q' is not one the model takes");
    CHECK_STATUS(kiln_onnx_session_run(s, in, 0), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("0 inputs given, the model takes 1: input 'x' is missing");
    in[0] = input("x", 2, x);
    in[1] = input("x", 2, x);
    CHECK_STATUS(kiln_onnx_session_run(s, in, 2), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("input 'x' is given twice");
    in[1] = input("q", 2, x); /* one input too many: the extra one is named */
    CHECK_STATUS(kiln_onnx_session_run(s, in, 2), KILN_E_NOT_FOUND);
    CHECK_ERROR_MENTIONS("input 'q' is not one the model takes");
    in[0].shape[1] = 4;
    CHECK_STATUS(kiln_onnx_session_run(s, in, 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("input 'x': dim 1 is 4, the model's is 3");
    in[0] = input("x", 2, x);
    in[0].rank = 3;
    CHECK_STATUS(kiln_onnx_session_run(s, in, 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("rank 3 given, the model takes rank 2");
    in[0] = input("x", 0, x);
    CHECK_STATUS(kiln_onnx_session_run(s, in, 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("dim 0 is 0");
    in[0] = input("x", 2, x);
    in[0].size -= 4;
    CHECK_STATUS(kiln_onnx_session_run(s, in, 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("20 bytes given, its shape needs 24");
    in[0] = input("x", 2, NULL);
    CHECK_STATUS(kiln_onnx_session_run(s, in, 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("data is NULL");
    in[0] = input("x", 2, (float *)((char *)x + 1));
    CHECK_STATUS(kiln_onnx_session_run(s, in, 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("not aligned to 4 bytes");
    in[0] = input("x", 2, x);
    in[0].type = KILN_ONNX_INT64;
    CHECK_STATUS(kiln_onnx_session_run(s, in, 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("type int64 given, the model takes float");
    in[0] = input("x", 2, x);
    CHECK_OK(kiln_onnx_session_run(s, in, 1));
    CHECK_STATUS(kiln_onnx_session_output(s, 1, NULL, 0, &out), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("the model has 1 outputs");
    CHECK_STATUS(kiln_onnx_session_output(s, 0, y, sizeof y, &out), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("output 'y' needs 16 bytes, the buffer holds 8");
    CHECK_OK(kiln_onnx_session_output(s, 0, NULL, 0, &out)); /* the shape alone */
    CHECK_EQ_INT(out.shape[0], 2);
    CHECK_EQ_INT(kiln_onnx_session_compiles(s), 1);
done:
    kiln_onnx_session_destroy(s);
    CHECK_STATUS(kiln_onnx_session_create(m, NULL, NULL), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_onnx_session_create(NULL, NULL, &s), KILN_E_INVALID_ARG);
    CHECK(s == NULL);
    kiln_onnx_session_destroy(NULL);
    kiln_onnx_destroy(m);
}

typedef struct swept {
    kiln_onnx *m;
    kiln_onnx_session *s;
} swept;

static kiln_status load_swept(void *user) {
    ((swept *)user)->m = load_mlp();
    return ((swept *)user)->m ? KILN_OK : KILN_E_FORMAT;
}

/* Create a session and run it once (the first compile included). */
static kiln_status create_and_run(void *user) {
    swept *w = user;
    float x[2 * 3] = {0};
    kiln_onnx_buffer in = input("x", 2, x);
    kiln_status st = kiln_onnx_session_create(w->m, NULL, &w->s);
    return st ? st : kiln_onnx_session_run(w->s, &in, 1);
}

static void destroy_swept(void *user) {
    swept *w = user;
    kiln_onnx_session_destroy(w->s);
    kiln_onnx_destroy(w->m);
    w->s = NULL;
    w->m = NULL;
}

static void every_allocation_failure_of_a_session_is_reported_as_nomem(void) {
    swept w = {NULL, NULL};
    harness_sweep sw = {"kiln_onnx_session_create + run", load_swept, create_and_run, destroy_swept, &w};
    CHECK(harness_alloc_sweep(&sw) >= 10);
}

/* Kilobytes of the process's memory resident in the mapping that starts at addr (/proc/self/smaps), or -1. */
static long resident_kb(const void *addr) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    long kb = -1;
    bool in = false;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = lo == (unsigned long)(uintptr_t)addr;
        else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

/* Loading reads the whole file (parsing, validating), so its pages are resident; once the first plan is
 * compiled the weights it reads are folded or packed copies, and the session hands the file's pages back
 * (a later read of the file faults its page in again). The output is unchanged by that: a second run
 * gives the same bytes. BERT's 2-layer export (109 KB). */
static void a_compiled_plan_hands_the_files_pages_back(void) {
    kiln_onnx *m = NULL;
    kiln_onnx_session *s = NULL;
    int64_t ids[5] = {1, 5, 9, 2, 7}, mask[5] = {1, 1, 1, 1, 0};
    kiln_onnx_buffer in[2], out;
    float first[5 * 32];
    CHECK_OK(kiln_onnx_load(harness_data_path("../onnx/torch_models/bert-dynamo.onnx"), &m));
    if (!m) return;
    long loaded = resident_kb(m->map);
    if (loaded < 0) goto done; /* no /proc here */
    CHECK(loaded >= 100);
    CHECK_OK(kiln_onnx_session_create(m, NULL, &s));
    if (!s) goto done;
    memset(in, 0, sizeof in);
    in[0].name = "input_ids", in[0].type = KILN_ONNX_INT64, in[0].rank = 2, in[0].shape[0] = 1;
    in[0].shape[1] = 5, in[0].data = ids, in[0].size = sizeof ids;
    in[1] = in[0];
    in[1].name = "attention_mask", in[1].data = mask;
    CHECK_OK(kiln_onnx_session_run(s, in, 2));
    long after = resident_kb(m->map);
    CHECK(after >= 0 && after <= loaded / 4);
    CHECK_OK(kiln_onnx_session_output(s, 0, first, sizeof first, &out));
    CHECK_OK(kiln_onnx_session_run(s, in, 2));
    float again[5 * 32];
    CHECK_OK(kiln_onnx_session_output(s, 0, again, sizeof again, &out));
    CHECK(memcmp(first, again, sizeof first) == 0);
done:
    kiln_onnx_session_destroy(s);
    kiln_onnx_destroy(m);
}

int main(void) {
    RUN(runs_at_each_batch_size_and_a_warm_run_allocates_nothing);
    RUN(bad_runs_and_reads_are_named_errors);
    RUN(every_allocation_failure_of_a_session_is_reported_as_nomem);
    RUN(a_compiled_plan_hands_the_files_pages_back);
    return harness_finish();
}
