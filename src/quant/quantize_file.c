/*
 * quantize_file.c - kiln_quantize_file: convert a GGUF model to a quantization mix. The input is mapped,
 * every key is copied (general.file_type and general.quantization_version are set to the mix's), each
 * tensor is described to the GGUF writer with the type the mix chooses (mix.c), and the writer's fill
 * callback produces the bytes one tensor at a time: each source row is converted to float (F32 as is,
 * other types through the reference dequantizers) and quantized with kiln_quantize_row. Memory beyond
 * the mapping is one row of floats plus the writer's buffer for the largest tensor. The writer writes a
 * temporary file and renames it, so an error leaves no partial output.
 */
#include "quant/mix.h"

#include "core/core.h"
#include "tensor/types.h"

#include <string.h>

typedef struct job {
    const kiln_gguf *in;
    kiln_quantize_params params;
    int64_t count;
    kiln_type *types;  /* chosen type per tensor */
    float *row;        /* one source row as float */
    kiln_quantize_progress_fn progress;
    void *user;
} job;

kiln_quantize_params kiln_quantize_params_default(void) {
    kiln_quantize_params p = {KILN_MIX_Q4_K_M, false};
    return p;
}

/* Convert tensor i into dst (size bytes of the chosen type), row by row. */
static kiln_status fill_tensor(void *user, int64_t i, void *dst, size_t size) {
    job *j = user;
    kiln_tensor_info t;
    kiln_status s = kiln_gguf_tensor_info(j->in, i, &t);
    size_t src_row, dst_row;
    if (s) return s;
    if (j->progress) j->progress(j->user, i, j->count, t.name, j->types[i]);
    if (j->types[i] == t.type) {
        memcpy(dst, t.data, size);
        return KILN_OK;
    }
    if ((s = kiln_type_row_bytes(t.type, t.ne[0], &src_row)) || (s = kiln_type_row_bytes(j->types[i], t.ne[0], &dst_row)))
        return s;
    int64_t rows = t.ne[1] * t.ne[2] * t.ne[3];
    for (int64_t r = 0; r < rows; r++) {
        const char *src = (const char *)t.data + (size_t)r * src_row;
        s = kiln_dequantize(t.type, src, j->row, t.ne[0]);
        if (!s) s = kiln_quantize_row(j->types[i], j->row, (char *)dst + (size_t)r * dst_row, t.ne[0]);
        if (s) return kiln__error_prefix(s, "tensor '%s' row %lld: ", t.name, (long long)r);
    }
    return KILN_OK;
}

/* Copy every key but the two the mix sets, then set them. */
static kiln_status copy_metadata(kiln_gguf_writer *w, const kiln_gguf *in, kiln_quant_mix mix) {
    kiln_status s = kiln_gguf_writer_set_alignment(w, kiln_gguf_alignment(in));
    uint32_t file_type = (uint32_t)mix, qversion = 2;
    for (int64_t i = 0; !s && i < kiln_gguf_kv_count(in); i++) {
        const char *key = kiln_gguf_kv_key(in, i);
        if (strcmp(key, "general.file_type") == 0 || strcmp(key, "general.quantization_version") == 0) continue;
        s = kiln_gguf_writer_copy_kv(w, in, i);
    }
    if (!s) s = kiln_gguf_writer_add_scalar(w, "general.quantization_version", KILN_GGUF_UINT32, &qversion);
    if (!s) s = kiln_gguf_writer_add_scalar(w, "general.file_type", KILN_GGUF_UINT32, &file_type);
    return s;
}

/* Choose every tensor's type, check it can be produced, and describe it to the writer. */
static kiln_status plan_tensors(kiln_gguf_writer *w, job *j, int64_t *max_row) {
    kiln__mix_state st;
    kiln__mix_state_init(&st, j->in);
    for (int64_t i = 0; i < j->count; i++) {
        kiln_tensor_info t;
        bool quantize;
        kiln_status s = kiln_gguf_tensor_info(j->in, i, &t);
        if (s) return s;
        j->types[i] = kiln__mix_choose(j->params.mix, &st, t.name, t.type, t.n_dims, t.ne, &quantize);
        if (quantize && j->types[i] != t.type) {
            bool float_src = t.type == KILN_TYPE_F32 || t.type == KILN_TYPE_F16 || t.type == KILN_TYPE_BF16;
            if (!float_src && !j->params.allow_requantize)
                return kiln__error(KILN_E_UNSUPPORTED,
                                   "tensor '%s' is already quantized (%s); requantizing loses quality "
                                   "(allow it explicitly to proceed)", t.name, kiln__type_name(t.type));
            if (!kiln__type_traits(t.type)->supported)
                return kiln__error(KILN_E_UNSUPPORTED, "tensor '%s' has type %s, which Kiln cannot read", t.name,
                                   kiln__type_name(t.type));
            if (t.ne[0] > *max_row) *max_row = t.ne[0];
        }
        s = kiln_gguf_writer_add_tensor(w, t.name, j->types[i], t.n_dims, t.ne, NULL);
        if (s) return s;
    }
    return KILN_OK;
}

kiln_status kiln_quantize_file(const char *in_path, const char *out_path, const kiln_quantize_params *params,
                               kiln_quantize_progress_fn progress, void *user) {
    kiln_gguf *in = NULL;
    kiln_gguf_writer *w = NULL;
    job j = {0};
    int64_t max_row = 0;
    kiln_status s;
    if (!in_path || !out_path || !params) return kiln__error(KILN_E_INVALID_ARG, "kiln_quantize_file: NULL argument");
    if (kiln__mix_base_type(params->mix) == KILN_TYPE_F32)
        return kiln__error(KILN_E_INVALID_ARG, "unknown quantization mix %d", (int)params->mix);
    s = kiln_gguf_open(in_path, &in);
    if (s) return kiln__error_prefix(s, "reading '%s': ", in_path);
    j.in = in;
    j.params = *params;
    j.count = kiln_gguf_tensor_count(in);
    j.progress = progress;
    j.user = user;
    j.types = kiln__alloc_array((size_t)(j.count ? j.count : 1), sizeof *j.types);
    if (!j.types) s = kiln__nomem("the tensor type plan");
    if (!s) s = kiln_gguf_writer_create(&w);
    if (!s) s = copy_metadata(w, in, params->mix);
    if (!s) s = plan_tensors(w, &j, &max_row);
    if (!s && max_row > 0 && !(j.row = kiln__alloc_array((size_t)max_row, sizeof(float))))
        s = kiln__nomem("a row buffer");
    if (!s) {
        kiln_gguf_writer_set_fill(w, fill_tensor, &j);
        s = kiln_gguf_writer_write_file(w, out_path);
    }
    if (s) s = kiln__error_prefix(s, "quantizing '%s' to %s: ", in_path, kiln_quant_mix_name(params->mix));
    kiln__dealloc(j.row);
    kiln__dealloc(j.types);
    kiln_gguf_writer_destroy(w);
    kiln_gguf_close(in);
    return s;
}
