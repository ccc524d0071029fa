/*
 * onnx_model.c - the public face of the ONNX reader: kiln_onnx_load maps a model file read-only (its folder
 * is where external data may come from), kiln_onnx_load_memory borrows a buffer; both decode
 * (onnx_parse.c) and validate (onnx_validate.c) and return a handle only when every check passed. The
 * getters read the immutable model: callable from any thread, pointers valid until kiln_onnx_destroy.
 */
#include "import/onnx/onnx_internal.h"

#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static kiln_status finish(kiln_onnx *m, kiln_onnx **out) {
    kiln_status s = kiln__onnx_parse(m);
    if (!s) s = kiln__onnx_validate(m);
    if (s) {
        kiln_onnx_destroy(m);
        return s;
    }
    *out = m;
    return KILN_OK;
}

static kiln_onnx *create(void) {
    kiln_onnx *m = kiln__calloc(1, sizeof *m);
    static const uint8_t empty[1];
    if (m) m->base = empty;
    return m;
}

kiln_status kiln_onnx_load_memory(const void *data, size_t size, const char *dir, kiln_onnx **out) {
    kiln_onnx *m;
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_onnx_load_memory: out is NULL");
    *out = NULL;
    if (!data && size)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_onnx_load_memory: NULL buffer of %zu bytes", size);
    m = create();
    if (!m) return kiln__nomem("an ONNX model");
    if (data) m->base = data;
    m->size = size;
    if (dir) {
        kiln_status s =
            kiln__onnx_strdup(m, (const uint8_t *)dir, strlen(dir), "the external data folder", &m->dir);
        if (s) {
            kiln_onnx_destroy(m);
            return s;
        }
    }
    return finish(m, out);
}

static kiln_status map_file(kiln_onnx *m, const char *path) {
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln__error(KILN_E_IO, "cannot open ONNX file '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kiln__error(KILN_E_IO, "ONNX file '%s' is not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return kiln__error(KILN_E_IO, "cannot map ONNX file '%s': %s", path, strerror(e));
        }
        m->map = p;
        m->map_size = (size_t)st.st_size;
        m->base = p;
        m->size = (size_t)st.st_size;
    }
    close(fd);
    return KILN_OK;
}

kiln_status kiln_onnx_load(const char *path, kiln_onnx **out) {
    kiln_onnx *m;
    const char *slash;
    kiln_status s;
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_onnx_load: out is NULL");
    *out = NULL;
    if (!path) return kiln__error(KILN_E_INVALID_ARG, "kiln_onnx_load: path is NULL");
    m = create();
    if (!m) return kiln__nomem("an ONNX model");
    slash = strrchr(path, '/');
    s = slash ? kiln__onnx_strdup(m, (const uint8_t *)path, (size_t)(slash - path) + (slash == path),
                                  "the model's folder", &m->dir)
              : kiln__onnx_strdup(m, (const uint8_t *)".", 1, "the model's folder", &m->dir);
    if (!s) s = map_file(m, path);
    if (s) {
        kiln_onnx_destroy(m);
        return s;
    }
    s = finish(m, out);
    if (s && s != KILN_E_IO && s != KILN_E_NOMEM) kiln__error_prefix(s, "ONNX file '%s': ", path);
    return s;
}

void kiln_onnx_destroy(kiln_onnx *m) {
    if (!m) return;
    kiln__onnx_external_free(m);
    kiln__gguf_index_free(&m->value_index);
    kiln__gguf_arena_free(&m->arena);
    if (m->map) munmap(m->map, m->map_size);
    kiln__dealloc(m);
}

int64_t kiln_onnx_opset(const kiln_onnx *m) {
    return m ? m->opset : -1;
}

int64_t kiln_onnx_ir_version(const kiln_onnx *m) {
    return m ? m->ir_version : -1;
}

const char *kiln_onnx_producer(const kiln_onnx *m) {
    return m ? m->producer : "";
}

int32_t kiln_onnx_input_count(const kiln_onnx *m) {
    return m ? m->n_feed : 0;
}

int32_t kiln_onnx_output_count(const kiln_onnx *m) {
    return m ? m->n_outputs : 0;
}

static void fill_value(const kiln__onnx_vinfo *v, kiln_onnx_value_info *out) {
    out->name = v->name;
    out->type = (kiln_onnx_type)v->type;
    out->rank = v->rank;
    out->dims = v->dims;
}

static kiln_status check_index(const kiln_onnx *m, const void *out, int32_t i, int32_t n, const char *what) {
    if (!m || !out) return kiln__error(KILN_E_INVALID_ARG, "%s: NULL model or out", what);
    if (i < 0 || i >= n) return kiln__error(KILN_E_RANGE, "%s: index %d is outside 0 .. %d", what, i, n - 1);
    return KILN_OK;
}

kiln_status kiln_onnx_input(const kiln_onnx *m, int32_t i, kiln_onnx_value_info *out) {
    kiln_status s = check_index(m, out, i, m ? m->n_feed : 0, "kiln_onnx_input");
    if (s) return s;
    fill_value(&kiln__onnx_value_find(m, m->inputs[m->feed[i]].name)->info, out);
    return KILN_OK;
}

kiln_status kiln_onnx_output(const kiln_onnx *m, int32_t i, kiln_onnx_value_info *out) {
    kiln_status s = check_index(m, out, i, m ? m->n_outputs : 0, "kiln_onnx_output");
    if (s) return s;
    fill_value(&kiln__onnx_value_find(m, m->outputs[i].name)->info, out);
    return KILN_OK;
}

kiln_status kiln_onnx_value(const kiln_onnx *m, const char *name, kiln_onnx_value_info *out) {
    const kiln__onnx_value *v;
    if (!m || !name || !out) return kiln__error(KILN_E_INVALID_ARG, "kiln_onnx_value: NULL argument");
    v = kiln__onnx_value_find(m, name);
    if (!v) return kiln__error(KILN_E_NOT_FOUND, "the graph has no value named '%.128s'", name);
    fill_value(&v->info, out);
    return KILN_OK;
}

int32_t kiln_onnx_node_count(const kiln_onnx *m) {
    return m ? m->n_nodes : 0;
}

kiln_status kiln_onnx_node(const kiln_onnx *m, int32_t i, kiln_onnx_node_info *out) {
    kiln_status s = check_index(m, out, i, m ? m->n_nodes : 0, "kiln_onnx_node");
    const kiln__onnx_node *n;
    if (s) return s;
    n = &m->nodes[i];
    *out = (kiln_onnx_node_info){n->name,    n->op_type, n->n_inputs, n->n_outputs,
                                 n->n_attrs, n->inputs,  n->outputs};
    return KILN_OK;
}

static void fill_tensor(const kiln__onnx_tensor *t, kiln_onnx_tensor_info *out) {
    *out = (kiln_onnx_tensor_info){
        t->name, (kiln_onnx_type)t->type, t->rank, t->dims, t->n_elements, t->data, t->size, t->external};
}

kiln_status kiln_onnx_node_attr(const kiln_onnx *m, int32_t node, int32_t j, kiln_onnx_attr_info *out) {
    kiln_status s = check_index(m, out, node, m ? m->n_nodes : 0, "kiln_onnx_node_attr");
    const kiln__onnx_attr *a;
    if (s) return s;
    if ((s = check_index(m, out, j, m->nodes[node].n_attrs, "kiln_onnx_node_attr"))) return s;
    a = &m->nodes[node].attrs[j];
    memset(out, 0, sizeof *out);
    out->name = a->name;
    out->type = (kiln_onnx_attr_type)a->type;
    out->i = a->i;
    out->f = a->f;
    out->s = a->s;
    out->n = a->n;
    out->ints = a->ints;
    out->floats = a->floats;
    out->strings = a->strings;
    if (a->t) fill_tensor(a->t, &out->t);
    return KILN_OK;
}

int32_t kiln_onnx_initializer_count(const kiln_onnx *m) {
    return m ? m->n_inits : 0;
}

kiln_status kiln_onnx_initializer(const kiln_onnx *m, int32_t i, kiln_onnx_tensor_info *out) {
    kiln_status s = check_index(m, out, i, m ? m->n_inits : 0, "kiln_onnx_initializer");
    if (s) return s;
    fill_tensor(&m->inits[i], out);
    return KILN_OK;
}
