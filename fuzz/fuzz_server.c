/*
 * fuzz_server.c - libFuzzer target for the request handling of `kiln serve`: a request body through the
 * same parsing and validation the HTTP layer calls (server/api.h), with no socket.
 *
 * Byte 0 chooses the endpoint (low 2 bits: /v1/chat/completions and /v1/completions through ks_api_parse,
 * /tokenize and /detokenize through ks_api_tokenize_json / ks_api_detokenize_json; bit 5 set:
 * /v1/embeddings through ks_api_parse instead), the chat template the decoder is served with (bits 2..4:
 * chatml, llama3, phi3, mistral, plain), and whether the request goes to the other kind of model (bit 6:
 * chat and completions to the encoder, embeddings to a decoder, which must refuse them); the rest is the
 * body. The decoder's vocabulary is the bundled stories260K's, the encoder's BERT's WordPiece vocabulary
 * (tests/data/vocab, 384-wide embeddings, 128 cells); the model limits are those test_server_api.c uses,
 * with the end-of-turn token found as server.c finds it. The HTTP framing itself (request line, headers, chunked
 * bodies) is libmicrohttpd's and is not fuzzed here; Kiln's code sees only the URL, the method and the
 * body, and the body is what this target feeds.
 * Checks:
 *   - a refused body yields a 4xx/5xx ks_api_error with a type and a message, whose JSON envelope
 *     (ks_api_error_json) is valid JSON and names the same param;
 *   - an accepted completion request holds a prompt of 1 .. n_ctx valid token ids, 1 .. max_tokens_cap
 *     tokens to generate, n in 1 .. KS_API_MAX_N, at most KS_API_MAX_STOP stop strings (each a
 *     non-empty string of at most KS_API_MAX_STOP_LEN bytes), logprobs in -1 .. 20, and the sampling
 *     fields in OpenAI's ranges;
 *   - an accepted /v1/embeddings request (only on the encoder) holds 1 .. KS_API_MAX_INPUTS inputs, each
 *     of 1 .. n_ctx valid token ids, whose lengths add up to its prompt;
 *   - a model of the wrong kind refuses the request (400);
 *   - an accepted /tokenize or /detokenize body gives back valid JSON.
 * Seeds: corpus/server; dictionary server.dict.
 */
#include "api.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_vocab *vocab, *bert_vocab;
static ks_api_model models[5], encoder;
static const char *const templates[5] = {"chatml", "llama3", "phi3", "mistral", "plain"};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    kiln_gguf *g = NULL;
    (void)argc, (void)argv;
    if (kiln_gguf_open(KILN_FUZZ_BUNDLED_MODEL, &g) != KILN_OK || kiln_vocab_create(g, &vocab) != KILN_OK) {
        fprintf(stderr, "fuzz_server: %s\n", kiln_last_error());
        abort();
    }
    kiln_gguf_close(g);
    g = NULL;
    if (kiln_gguf_open(KILN_FUZZ_VOCAB_DIR "/ggml-vocab-bert-bge.gguf", &g) != KILN_OK ||
        kiln_vocab_create(g, &bert_vocab) != KILN_OK) {
        fprintf(stderr, "fuzz_server: %s\n", kiln_last_error());
        abort();
    }
    kiln_gguf_close(g);
    encoder = (ks_api_model){.id = "bert.gguf", .vocab = bert_vocab, .tmpl = kiln_chat_template_by_name("plain"),
                             .eot_token = -1, .n_ctx = 128, .n_ctx_train = 512, .max_tokens_cap = 1,
                             .default_max_tokens = 1, .created = 1700000000, .embeddings = true, .n_embd = 384};
    for (int i = 0; i < 5; i++) {
        ks_api_model *m = &models[i];
        m->id = "stories260K.gguf";
        m->vocab = vocab;
        m->tmpl = kiln_chat_template_by_name(templates[i]);
        const char *eot = kiln_chat_template_end_of_turn(m->tmpl);
        m->eot_token = eot ? kiln_vocab_find_token(vocab, eot, strlen(eot)) : -1;
        m->n_ctx = 256;
        m->n_ctx_train = 512;
        m->max_tokens_cap = 200;
        m->default_max_tokens = 200;
        m->created = 1700000000;
    }
    return 0;
}

static void check_json(const char *text) {
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    if (!j) __builtin_trap();
    json_decref(j);
}

static void check_error(const ks_api_error *err) {
    if (err->status < 400 || err->status > 599 || !err->type || err->message[0] == '\0') __builtin_trap();
    char *env = ks_api_error_json(err);
    if (!env) return;
    json_error_t jerr;
    json_t *j = json_loads(env, 0, &jerr);
    if (!j) __builtin_trap();
    json_t *param = json_object_get(json_object_get(j, "error"), "param");
    if (err->param[0] ? !json_is_string(param) || strcmp(json_string_value(param), err->param) != 0
                      : !json_is_null(param))
        __builtin_trap();
    json_decref(j);
    free(env);
}

static void check_request(const ks_api_request *r, const ks_api_model *m) {
    const ks_request *q = &r->req;
    if (q->n_prompt < 1 || q->n_prompt > m->n_ctx || q->prompt != r->prompt) __builtin_trap();
    for (int32_t i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 0 || q->prompt[i] >= kiln_vocab_n_tokens(m->vocab)) __builtin_trap();
    if (q->max_tokens < 1 || q->max_tokens > m->max_tokens_cap || q->n < 1 || q->n > KS_API_MAX_N)
        __builtin_trap();
    if (q->n_stop < 0 || q->n_stop > KS_API_MAX_STOP || (q->n_stop > 0) != (q->stop != NULL))
        __builtin_trap();
    for (int32_t i = 0; i < q->n_stop; i++) {
        size_t k = strlen(q->stop[i]);
        if (k == 0 || k > KS_API_MAX_STOP_LEN) __builtin_trap();
    }
    if (q->logprobs < -1 || q->logprobs > KS_API_MAX_TOP_LOGPROBS_CHAT) __builtin_trap();
    if (!(q->temperature >= 0 && q->temperature <= 2) || !(q->top_p >= 0 && q->top_p <= 1) ||
        !(q->presence_penalty >= -2 && q->presence_penalty <= 2) ||
        !(q->frequency_penalty >= -2 && q->frequency_penalty <= 2) || q->top_k < 0 || !(q->min_p >= 0))
        __builtin_trap();
    if (q->eot_token != m->eot_token && !q->ignore_eos) __builtin_trap();
}

static void check_embedding_request(const ks_api_request *r, const ks_api_model *m) {
    const ks_request *q = &r->req;
    int64_t total = 0;
    if (r->kind != KS_API_EMBEDDING || q->n_inputs < 1 || q->n_inputs > KS_API_MAX_INPUTS || !r->input_lens)
        __builtin_trap();
    for (int32_t i = 0; i < q->n_inputs; i++) {
        if (r->input_lens[i] < 1 || r->input_lens[i] > m->n_ctx) __builtin_trap();
        total += r->input_lens[i];
    }
    if (total != q->n_prompt) __builtin_trap();
    for (int32_t i = 0; i < q->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= kiln_vocab_n_tokens(m->vocab)) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool embed = data[0] & 0x20, other = data[0] & 0x40;
    const ks_api_model *decoder = &models[(data[0] >> 2 & 7) % 5];
    const ks_api_model *m = embed != other ? &encoder : decoder;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    ks_api_error err;
    memset(&err, 0, sizeof err);
    if (embed || other) {
        ks_api_kind kind = embed ? KS_API_EMBEDDING : (data[0] & 1) ? KS_API_COMPLETION : KS_API_CHAT;
        ks_api_request r;
        bool ok = ks_api_parse(kind, body, len, m, &r, &err);
        if (!ok) {
            check_error(&err);
            return 0;
        }
        if (other || !embed) __builtin_trap(); /* the wrong kind of model accepted it */
        check_embedding_request(&r, m);
        ks_api_request_free(&r);
        return 0;
    }
    if ((data[0] & 3) < 2) {
        ks_api_request r;
        if (!ks_api_parse((data[0] & 3) == 0 ? KS_API_CHAT : KS_API_COMPLETION, body, len, m, &r, &err)) {
            check_error(&err);
            return 0;
        }
        check_request(&r, m);
        ks_api_request_free(&r);
        return 0;
    }
    char *out = (data[0] & 3) == 2 ? ks_api_tokenize_json(body, len, m, &err)
                                   : ks_api_detokenize_json(body, len, m, &err);
    if (!out) {
        check_error(&err);
        return 0;
    }
    check_json(out);
    free(out);
    return 0;
}
