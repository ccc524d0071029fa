/*
 * test_server_embed.c - /v1/embeddings of `kiln serve` on the real all-MiniLM-L6-v2 (the embed_model_setup
 * fixture of tests/embed.cmake converts it): every malformed body is refused with a 400 naming its field
 * (dimensions, encoding_format, input of every wrong shape, an input longer than the context); texts
 * tokenize to the Hugging Face tokenizer's ids of tests/data/embed/minilm_ref.json; the engine batches
 * several inputs, and several requests, per decode and gives each input sentence-transformers' vector
 * (cosine >= 0.9999, test_embed's F32 tolerance); the response carries the vectors as floats or as
 * base64 of the same float32 bytes; an encoder refuses generation and a decoder embeddings.
 */
#include "api.h"
#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifndef KILN_MINILM_DIR /* tests/embed.cmake defines it: the build tree's minilm/ */
#define KILN_MINILM_DIR KILN_TEST_TMP "/../minilm"
#endif
#define N_EMBD 384
#define N_REFS 16

static kiln_model *minilm;
static ks_api_model api_model;
static json_t *refs; /* minilm_ref.json's "sentences" */

static bool setup(void) {
    kiln_status s = kiln_model_load(KILN_MINILM_DIR "/minilm-f32.gguf", &minilm);
    if (s) {
        harness_fail(__FILE__, __LINE__, "%s: %s (the embed_model_setup fixture converts it)",
                     KILN_MINILM_DIR "/minilm-f32.gguf", kiln_last_error());
        return false;
    }
    api_model.id = "minilm-f32.gguf";
    api_model.vocab = kiln_model_vocab(minilm);
    api_model.tmpl = kiln_chat_template_by_name("plain");
    api_model.eot_token = -1;
    api_model.n_ctx = kiln_model_n_ctx_train(minilm);
    api_model.n_ctx_train = api_model.n_ctx;
    api_model.max_tokens_cap = api_model.n_ctx;
    api_model.embeddings = !kiln_model_is_causal(minilm);
    api_model.n_embd = kiln_model_n_embd(minilm);
    size_t size;
    char *doc = harness_read_file(harness_data_path("embed/minilm_ref.json"), &size);
    json_t *root = doc ? json_loadb(doc, size, 0, NULL) : NULL;
    free(doc);
    refs = json_incref(json_object_get(root, "sentences"));
    json_decref(root);
    CHECK(api_model.embeddings);
    CHECK_EQ_INT(api_model.n_embd, N_EMBD);
    CHECK_EQ_INT(json_array_size(refs), N_REFS);
    return json_array_size(refs) == N_REFS && api_model.embeddings;
}

static const char *ref_text(size_t i) {
    return json_string_value(json_object_get(json_array_get(refs, i), "text"));
}
static json_t *ref_ids(size_t i) {
    return json_object_get(json_array_get(refs, i), "ids");
}
static float ref_embd(size_t i, size_t k) {
    return (float)json_number_value(json_array_get(json_object_get(json_array_get(refs, i), "embedding"), k));
}

static bool parse(const char *body, ks_api_request *r, ks_api_error *err) {
    return ks_api_parse(KS_API_EMBEDDING, body, strlen(body), &api_model, r, err);
}

static void every_malformed_body_is_refused_naming_its_field(void) {
    static const struct {
        const char *body, *param, *code, *fragment;
    } cases[] = {
        {"{}", "input", NULL, "'input' is required"},
        {"{\"input\":null}", "input", NULL, "'input' is required"},
        {"{\"input\":3}", "input", NULL, "must be a string, an array of strings"},
        {"{\"input\":{}}", "input", NULL, "must be a string"},
        {"{\"input\":[]}", "input", NULL, "'input' is an empty array"},
        {"{\"input\":[[]]}", "input", NULL, "input[0] has no tokens"},
        {"{\"input\":[\"a\",[1,2]]}", "input", NULL, "input[1] is not of the same kind as input[0]"},
        {"{\"input\":[[101,102],\"a\"]}", "input", NULL, "input[1] is not of the same kind as input[0]"},
        {"{\"input\":[[101,102],[3.5]]}", "input", NULL, "input[1][0] is not a token id"},
        {"{\"input\":[101,-1]}", "input", NULL, "input[0][1] is not a token id"},
        {"{\"input\":[101,30522]}", "input", NULL, "input[0][1] is not a token id (an integer 0 .. 30521)"},
        {"{\"input\":[true]}", "input", NULL, "input[0] must be a string or an array of token ids"},
        {"{\"input\":\"a\",\"encoding_format\":\"binary\"}", "encoding_format", NULL,
         "\"float\" or \"base64\""},
        {"{\"input\":\"a\",\"encoding_format\":1}", "encoding_format", NULL, "\"float\" or \"base64\""},
        {"{\"input\":\"a\",\"dimensions\":128}", "dimensions", NULL, "'dimensions' must be 384"},
        {"{\"input\":\"a\",\"dimensions\":\"384\"}", "dimensions", NULL, "'dimensions' must be 384"},
        {"[\"a\"]", "", NULL, "must be a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ks_api_request r;
        ks_api_error err;
        if (parse(cases[i].body, &r, &err)) {
            harness_fail(__FILE__, __LINE__, "%s was accepted", cases[i].body);
            ks_api_request_free(&r);
            continue;
        }
        CHECK_EQ_INT(err.status, 400);
        CHECK_STR(err.type, "invalid_request_error");
        CHECK_STR(err.param, cases[i].param);
        if (!strstr(err.message, cases[i].fragment))
            harness_fail(__FILE__, __LINE__, "%s: \"%s\" does not mention \"%s\"", cases[i].body, err.message,
                         cases[i].fragment);
    }
}

static void inputs_longer_than_the_context_or_too_many_are_refused(void) {
    ks_api_request r;
    ks_api_error err;
    size_t cap = 8 * 1024 * 8;
    char *body = malloc(cap);
    /* 600 ids: past the model's 512 positions. */
    size_t n = (size_t)snprintf(body, cap, "{\"input\":[101");
    for (int i = 0; i < 599; i++)
        n += (size_t)snprintf(body + n, cap - n, ",1996");
    snprintf(body + n, cap - n, "]}");
    CHECK(!parse(body, &r, &err));
    CHECK_STR(err.code, "context_length_exceeded");
    CHECK_STR(err.param, "input");
    CHECK(strstr(err.message, "maximum context length is 512 tokens, however input[0] has 600 tokens"));
    /* A text of 600 words: 602 tokens with [CLS] and [SEP]. */
    n = (size_t)snprintf(body, cap, "{\"input\":[\"ok\",\"");
    for (int i = 0; i < 600; i++)
        n += (size_t)snprintf(body + n, cap - n, "the ");
    snprintf(body + n, cap - n, "\"]}");
    CHECK(!parse(body, &r, &err));
    CHECK_STR(err.code, "context_length_exceeded");
    CHECK(strstr(err.message, "input[1] has 602 tokens"));
    /* 2049 inputs. */
    n = (size_t)snprintf(body, cap, "{\"input\":[\"a\"");
    for (int i = 0; i < KS_API_MAX_INPUTS; i++)
        n += (size_t)snprintf(body + n, cap - n, ",\"a\"");
    snprintf(body + n, cap - n, "]}");
    CHECK(!parse(body, &r, &err));
    CHECK(strstr(err.message, "'input' has 2049 inputs; at most 2048"));
    free(body);
}

static void every_shape_of_input_gives_its_token_lists(void) {
    ks_api_request r;
    ks_api_error err;
    /* Texts become [CLS] text [SEP], with the Hugging Face tokenizer's ids. */
    json_t *j = json_pack("{s:[s,s], s:i, s:s}", "input", ref_text(0), ref_text(5), "dimensions", N_EMBD,
                          "encoding_format", "base64");
    char *body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    CHECK(parse(body, &r, &err));
    free(body);
    CHECK_EQ_INT(r.req.n_inputs, 2);
    CHECK(r.base64);
    int32_t at = 0;
    for (int32_t i = 0; i < 2 && r.req.n_inputs == 2; i++) {
        json_t *ids = ref_ids(i == 0 ? 0 : 5);
        CHECK_EQ_INT(r.req.input_lens[i], json_array_size(ids));
        for (size_t k = 0; k < json_array_size(ids) && i < r.req.n_inputs; k++)
            CHECK_EQ_INT(r.req.prompt[at + (int32_t)k], json_integer_value(json_array_get(ids, k)));
        at += r.req.input_lens[i];
    }
    CHECK_EQ_INT(r.req.n_prompt, at);
    ks_api_request_free(&r);
    /* A lone string, a lone token array, an array of token arrays; an empty text is [CLS] [SEP]. */
    CHECK(parse("{\"input\":\"\"}", &r, &err));
    CHECK_EQ_INT(r.req.n_inputs, 1);
    CHECK_EQ_INT(r.req.n_prompt, 2);
    CHECK(!r.base64);
    ks_api_request_free(&r);
    CHECK(parse("{\"input\":[101,7592,102],\"encoding_format\":\"float\"}", &r, &err));
    CHECK_EQ_INT(r.req.n_inputs, 1);
    CHECK_EQ_INT(r.req.n_prompt, 3);
    CHECK_EQ_INT(r.req.prompt[1], 7592);
    ks_api_request_free(&r);
    CHECK(parse("{\"input\":[[101,102],[7592]]}", &r, &err));
    CHECK_EQ_INT(r.req.n_inputs, 2);
    CHECK_EQ_INT(r.req.input_lens[0], 2);
    CHECK_EQ_INT(r.req.input_lens[1], 1);
    ks_api_request_free(&r);
}

static void an_encoder_refuses_generation_and_a_decoder_embeddings(void) {
    ks_api_request r;
    ks_api_error err;
    const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}";
    CHECK(!ks_api_parse(KS_API_CHAT, chat, strlen(chat), &api_model, &r, &err));
    CHECK_EQ_INT(err.status, 400);
    CHECK_STR(err.code, "model_not_generative");
    CHECK(strstr(err.message, "is an encoder"));
    CHECK(!ks_api_parse(KS_API_COMPLETION, "{\"prompt\":\"x\"}", 14, &api_model, &r, &err));
    CHECK_STR(err.code, "model_not_generative");
    ks_api_model decoder = api_model;
    decoder.embeddings = false;
    CHECK(!ks_api_parse(KS_API_EMBEDDING, "{\"input\":\"x\"}", 13, &decoder, &r, &err));
    CHECK_STR(err.code, "model_not_embedding");
    CHECK_STR(err.param, "model");
}

/* ---- the engine ---- */

typedef struct collector {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ks_api_result *res;
    int embeddings;
    bool done, error;
    uint64_t steps_seen[N_REFS]; /* metrics.steps during each input's event */
    ks_engine *engine;
} collector;

static void on_event(void *user, const ks_event *ev) {
    collector *c = user;
    ks_metrics m;
    ks_engine_metrics(c->engine, &m);
    pthread_mutex_lock(&c->mu);
    if (ev->kind == KS_EVENT_EMBEDDING && ev->choice >= 0 && ev->choice < N_REFS) {
        c->steps_seen[ev->choice] = m.steps;
        c->embeddings++;
    }
    CHECK(ks_api_result_event(c->res, ev, NULL, NULL));
    if (ev->kind == KS_EVENT_DONE) c->done = true;
    if (ev->kind == KS_EVENT_ERROR) c->error = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void wait_done(collector *c) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 120;
    pthread_mutex_lock(&c->mu);
    while (!c->done && !c->error)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &t)) break;
    pthread_mutex_unlock(&c->mu);
    CHECK(c->done);
}

static double cosine(const float *a, size_t i) {
    double dot = 0, na = 0, nb = 0;
    for (size_t k = 0; k < N_EMBD; k++) {
        double b = ref_embd(i, k);
        dot += a[k] * b;
        na += (double)a[k] * a[k];
        nb += b * b;
    }
    return dot / sqrt(na * nb);
}

/* The "embedding" of data[i] in a response, as floats (decoded from base64 when it is a string). */
static bool response_vector(const char *json, size_t i, float *out) {
    json_t *root = json_loads(json, 0, NULL);
    json_t *e = json_object_get(json_array_get(json_object_get(root, "data"), i), "embedding");
    bool ok = false;
    if (json_is_array(e) && json_array_size(e) == N_EMBD) {
        for (size_t k = 0; k < N_EMBD; k++)
            out[k] = (float)json_number_value(json_array_get(e, k));
        ok = true;
    } else if (json_is_string(e) && json_string_length(e) == (N_EMBD * 4 + 2) / 3 * 4) {
        static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const char *s = json_string_value(e);
        unsigned char bytes[N_EMBD * 4 + 3];
        size_t nb = 0;
        for (size_t k = 0; s[k] && s[k + 1] && s[k + 2] && s[k + 3]; k += 4) {
            uint32_t w = 0;
            for (int j = 0; j < 4; j++)
                w = w << 6 |
                    (uint32_t)(s[k + (size_t)j] == '=' ? 0 : strchr(digits, s[k + (size_t)j]) - digits);
            bytes[nb++] = (unsigned char)(w >> 16);
            bytes[nb++] = (unsigned char)(w >> 8);
            bytes[nb++] = (unsigned char)w;
        }
        for (size_t k = 0; k < N_EMBD; k++) {
            uint32_t u = (uint32_t)bytes[4 * k] | (uint32_t)bytes[4 * k + 1] << 8 |
                         (uint32_t)bytes[4 * k + 2] << 16 | (uint32_t)bytes[4 * k + 3] << 24;
            memcpy(&out[k], &u, 4);
        }
        ok = nb >= N_EMBD * 4;
    }
    json_decref(root);
    return ok;
}

/* All 16 reference sentences as token arrays in one request (the truncated one as its 256 ids), and the
 * same 16 split over two concurrent requests as texts, the second base64. */
static void the_engine_batches_inputs_and_matches_sentence_transformers(void) {
    ks_engine_params p = ks_engine_params_default();
    ks_engine *e = NULL;
    CHECK_OK(ks_engine_create(minilm, &p, &e));
    if (!e) return;
    CHECK(ks_engine_embeds(e));
    json_t *body = json_pack("{s:[]}", "input");
    for (size_t i = 0; i < N_REFS; i++)
        json_array_append(json_object_get(body, "input"), ref_ids(i));
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    ks_api_request r;
    ks_api_error err;
    CHECK(parse(text, &r, &err));
    free(text);
    collector c = {.engine = e};
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    c.res = ks_api_result_create(&r, &api_model, 1, 0);
    ks_handle h;
    ks_metrics before, after;
    ks_engine_metrics(e, &before);
    CHECK_OK(ks_engine_submit(e, &r.req, on_event, &c, &h));
    wait_done(&c);
    ks_engine_metrics(e, &after);
    CHECK_EQ_INT(c.embeddings, N_REFS);
    /* 16 inputs of 441 tokens in all (one of 256) fit one batch of 512: fewer decodes than inputs. */
    CHECK(after.steps - before.steps < N_REFS);
    CHECK(c.steps_seen[0] == c.steps_seen[1]);
    CHECK_EQ_INT(after.prompt_tokens - before.prompt_tokens, r.req.n_prompt);
    char *json = ks_api_result_json(c.res);
    float v[N_EMBD];
    for (size_t i = 0; json && i < N_REFS; i++) {
        CHECK(response_vector(json, i, v));
        double cs = cosine(v, i);
        if (!(cs >= 0.9999)) harness_fail(__FILE__, __LINE__, "sentence %zu: cosine %.8f < 0.9999", i, cs);
    }
    json_t *root = json_loads(json, 0, NULL);
    CHECK_STR(json_string_value(json_object_get(root, "object")), "list");
    CHECK_STR(json_string_value(json_object_get(root, "model")), "minilm-f32.gguf");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(root, "usage"), "prompt_tokens")),
                 r.req.n_prompt);
    CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(root, "data"), 3), "object")),
              "embedding");
    CHECK_EQ_INT(
        json_integer_value(json_object_get(json_array_get(json_object_get(root, "data"), 3), "index")), 3);
    json_decref(root);

    /* The same vectors as base64: bit for bit the floats of the float response. */
    ks_api_request r64;
    json_t *j64 = json_pack("{s:[s], s:s}", "input", ref_text(0), "encoding_format", "base64");
    char *body64 = json_dumps(j64, JSON_COMPACT);
    json_decref(j64);
    CHECK(parse(body64, &r64, &err));
    free(body64);
    collector c64 = {.engine = e};
    pthread_mutex_init(&c64.mu, NULL);
    pthread_cond_init(&c64.cv, NULL);
    c64.res = ks_api_result_create(&r64, &api_model, 2, 0);
    CHECK_OK(ks_engine_submit(e, &r64.req, on_event, &c64, &h));
    wait_done(&c64);
    char *json64 = ks_api_result_json(c64.res);
    float w[N_EMBD];
    CHECK(json64 && strstr(json64, "\"embedding\":\""));
    CHECK(json64 && response_vector(json64, 0, w) && json && response_vector(json, 0, v));
    for (size_t k = 0; k < N_EMBD; k++)
        CHECK_NEAR(w[k], v[k], 5e-7); /* one input alone vs. in a batch of 16 */

    /* An encoder's engine refuses a generation request. */
    int32_t ids[3] = {101, 7592, 102};
    ks_request gen = ks_request_default();
    gen.prompt = ids;
    gen.n_prompt = 3;
    CHECK_STATUS(ks_engine_submit(e, &gen, on_event, &c, &h), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("the model is an encoder");

    free(json);
    free(json64);
    ks_api_result_destroy(c.res);
    ks_api_result_destroy(c64.res);
    ks_api_request_free(&r);
    ks_api_request_free(&r64);
    ks_engine_destroy(e);
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c64.mu);
    pthread_cond_destroy(&c64.cv);
}

int main(void) {
    if (setup()) {
        RUN(every_malformed_body_is_refused_naming_its_field);
        RUN(inputs_longer_than_the_context_or_too_many_are_refused);
        RUN(every_shape_of_input_gives_its_token_lists);
        RUN(an_encoder_refuses_generation_and_a_decoder_embeddings);
        RUN(the_engine_batches_inputs_and_matches_sentence_transformers);
    }
    json_decref(refs);
    kiln_model_destroy(minilm);
    return harness_finish();
}
