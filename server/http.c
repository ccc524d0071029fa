/*
 * http.c - the libmicrohttpd daemon of `kiln serve`: its options (one internal polling thread on epoll
 * where the library has it, else poll; suspend/resume for requests that wait on the engine; a connection
 * limit; the read/idle timeout), the route table, the API-key check, the body limit, and the small
 * endpoints. Completion requests continue in http_completion.c.
 *
 * Order of checks for every request: the route (404, or 405 with Allow), the API key (401; all routes
 * but GET /health and GET /, the page, which holds no data and sends the key itself), the server's state
 * (503 while loading or shutting down), the declared Content-Length (413 before reading the body), then
 * the body as it arrives (413 as soon as it passes the limit).
 */
#include "http.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef enum route_id {
    R_PAGE,
    R_HEALTH,
    R_MODELS,
    R_MODEL,
    R_METRICS,
    R_CHAT,
    R_COMPLETIONS,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_EMBEDDINGS,
    R_SLOTS,
} route_id;

typedef struct route {
    const char *path;
    route_id id;
    bool post;      /* POST, else GET (and HEAD) */
    bool prefix;    /* path is a prefix: /v1/models/{id} */
    bool open;      /* no API key needed */
    bool any_state; /* served while loading and shutting down */
} route;

static const route routes[] = {
    {"/", R_PAGE, false, false, true, true},
    {"/health", R_HEALTH, false, false, true, true},
    {"/metrics", R_METRICS, false, false, false, false},
    {"/v1/models", R_MODELS, false, false, false, false},
    {"/models", R_MODELS, false, false, false, false},
    {"/v1/models/", R_MODEL, false, true, false, false},
    {"/v1/chat/completions", R_CHAT, true, false, false, false},
    {"/chat/completions", R_CHAT, true, false, false, false},
    {"/v1/completions", R_COMPLETIONS, true, false, false, false},
    {"/completions", R_COMPLETIONS, true, false, false, false},
    {"/tokenize", R_TOKENIZE, true, false, false, false},
    {"/detokenize", R_DETOKENIZE, true, false, false, false},
    {"/v1/embeddings", R_EMBEDDINGS, true, false, false, false},
    {"/embeddings", R_EMBEDDINGS, true, false, false, false},
    {"/slots/", R_SLOTS, true, true, false, false},
};
#define N_ROUTES (int)(sizeof routes / sizeof routes[0])

MHD_Result ks_http_respond(struct MHD_Connection *conn, unsigned status, const char *type, char *body,
                           const char *h1, const char *v1) {
    if (!body) {
        status = 500;
        type = "application/json";
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                      "\"code\":null}}");
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (h1) MHD_add_response_header(resp, h1, v1);
    MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

MHD_Result ks_http_respond_error(ks_http *h, struct MHD_Connection *conn, const ks_api_error *err) {
    const char *h1 = NULL, *v1 = NULL;
    if (err->status == 429) h1 = MHD_HTTP_HEADER_RETRY_AFTER, v1 = "1";
    if (err->status == 401) h1 = MHD_HTTP_HEADER_WWW_AUTHENTICATE, v1 = "Bearer";
    return ks_http_respond(conn, (unsigned)err->status, "application/json", ks_api_error_json(err), h1, v1);
}

/* Compares in time that depends only on the key's length, never on where the bytes differ. */
static bool key_matches(const char *given, const char *key) {
    size_t n = strlen(key), m = strlen(given);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(key[i] ^ (i < m ? given[i] : 0));
    return diff == 0;
}

static bool authorized(ks_http *h, struct MHD_Connection *conn) {
    if (!h->params->api_key) return true;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) return key_matches(auth + 7, h->params->api_key);
    const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Api-Key");
    return x && key_matches(x, h->params->api_key);
}

static int find_route(const char *url, const char *method, const char **allow, ks_api_error *err) {
    bool post = !strcmp(method, "POST"), get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    for (int i = 0; i < N_ROUTES; i++) {
        const route *r = &routes[i];
        bool match = r->prefix ? !strncmp(url, r->path, strlen(r->path)) && url[strlen(r->path)]
                               : !strcmp(url, r->path);
        if (!match) continue;
        if ((r->post && post) || (!r->post && get)) return i;
        *allow = r->post ? "POST" : "GET, HEAD";
        ks_api_fail(err, 405, "invalid_request_error", "method_not_allowed", NULL,
                    "method %.16s is not allowed on %.100s; use %s", method, url, r->post ? "POST" : "GET");
        return -1;
    }
    ks_api_fail(err, 404, "invalid_request_error", "unknown_url", NULL, "unknown URL: %.16s %.200s", method,
                url);
    return -1;
}

/* The checks that need only the headers. Returns false with err filled when the request is refused. */
static bool admit(ks_http *h, http_req *r, const char *url, const char *method, ks_api_error *err) {
    if ((r->route = find_route(url, method, &r->allow, err)) < 0) return false;
    const route *rt = &routes[r->route];
    if (!rt->open && !authorized(h, r->conn))
        return ks_api_fail(err, 401, "invalid_request_error", "invalid_api_key", NULL,
                           "missing or incorrect API key: send it as 'Authorization: Bearer KEY'");
    int state = atomic_load(&h->state);
    if (!rt->any_state && state != KS_STATE_READY)
        return ks_api_fail(err, 503, "server_error",
                           state == KS_STATE_LOADING ? "model_loading" : "shutting_down", NULL,
                           state == KS_STATE_LOADING ? "the model is still loading; retry shortly"
                                                     : "the server is shutting down");
    const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (end == cl || *end || n > h->params->max_body)
            return ks_api_fail(err, 413, "invalid_request_error", "request_too_large", NULL,
                               "the request body (Content-Length %.24s) is over the limit of %zu bytes", cl,
                               h->params->max_body);
    }
    return true;
}

static bool take_upload(ks_http *h, http_req *r, const char *data, size_t n) {
    if (r->too_big || n > h->params->max_body - r->len) {
        r->too_big = true;
        return false;
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < r->len + n + 1)
            cap *= 2;
        char *b = realloc(r->body, cap);
        if (!b) {
            r->too_big = true;
            return false;
        }
        r->body = b;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
    return true;
}

static MHD_Result serve_json(struct MHD_Connection *conn, ks_http *h, char *body, const ks_api_error *err) {
    if (!body) return ks_http_respond_error(h, conn, err);
    return ks_http_respond(conn, 200, "application/json", body, NULL, NULL);
}

static MHD_Result serve_health(ks_http *h, struct MHD_Connection *conn) {
    int state = atomic_load(&h->state);
    const char *body = state == KS_STATE_READY     ? "{\"status\":\"ok\"}"
                       : state == KS_STATE_LOADING ? "{\"status\":\"loading\"}"
                                                   : "{\"status\":\"shutting_down\"}";
    return ks_http_respond(conn, state == KS_STATE_READY ? 200 : 503, "application/json", strdup(body), NULL,
                           NULL);
}

static MHD_Result serve_model(ks_http *h, struct MHD_Connection *conn, const char *url) {
    const char *id = url + strlen("/v1/models/");
    ks_api_error err;
    if (strcmp(id, h->model.id) != 0) {
        ks_api_fail(&err, 404, "invalid_request_error", "model_not_found", "model",
                    "the model '%.200s' does not exist; this server serves '%s'", id, h->model.id);
        return ks_http_respond_error(h, conn, &err);
    }
    char *list = ks_api_models_json(&h->model), *one = NULL;
    /* The list's one entry is the model object: cut it out of {"object":"list","data":[ ... ]}. */
    char *start = list ? strchr(list, '[') : NULL, *end = list ? strrchr(list, ']') : NULL;
    if (start && end && end > start) one = strndup(start + 1, (size_t)(end - start - 1));
    free(list);
    return ks_http_respond(conn, 200, "application/json", one, NULL, NULL);
}

/* The engine requests: chat, completions and embeddings. */
static bool engine_route(int i) {
    route_id id = routes[i].id;
    return id == R_CHAT || id == R_COMPLETIONS || id == R_EMBEDDINGS;
}

static ks_api_kind api_kind(int i) {
    route_id id = routes[i].id;
    return id == R_CHAT ? KS_API_CHAT : id == R_COMPLETIONS ? KS_API_COMPLETION : KS_API_EMBEDDING;
}

static MHD_Result dispatch(ks_http *h, http_req *r, const char *url) {
    ks_api_error err;
    ks_metrics m;
    switch (routes[r->route].id) {
    case R_PAGE:
        return ks_http_respond(r->conn, 200, "text/html; charset=utf-8",
                               strndup((const char *)ks_page_html, ks_page_html_len), NULL, NULL);
    case R_HEALTH: return serve_health(h, r->conn);
    case R_MODELS: return serve_json(r->conn, h, ks_api_models_json(&h->model), NULL);
    case R_MODEL: return serve_model(h, r->conn, url);
    case R_METRICS:
        ks_engine_metrics(h->engine, &m);
        return ks_http_respond(r->conn, 200, "text/plain; version=0.0.4; charset=utf-8",
                               ks_metrics_text(&m, atomic_load(&h->rejected)), NULL, NULL);
    case R_TOKENIZE:
        return serve_json(r->conn, h, ks_api_tokenize_json(r->body, r->len, &h->model, &err), &err);
    case R_DETOKENIZE:
        return serve_json(r->conn, h, ks_api_detokenize_json(r->body, r->len, &h->model, &err), &err);
    case R_CHAT:
    case R_COMPLETIONS:
    case R_EMBEDDINGS: return ks_http_completion(r, api_kind(r->route));
    case R_SLOTS: return ks_http_slots(h, r, url);
    }
    return MHD_NO;
}

static MHD_Result refuse(ks_http *h, http_req *r, const ks_api_error *err) {
    r->phase = PHASE_RESPONDED;
    if (r->route >= 0 && engine_route(r->route)) atomic_fetch_add(&h->rejected, 1);
    if (err->status == 405)
        return ks_http_respond(r->conn, 405, "application/json", ks_api_error_json(err),
                               MHD_HTTP_HEADER_ALLOW, r->allow);
    return ks_http_respond_error(h, r->conn, err);
}

static MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                             const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    ks_http *h = cls;
    http_req *r = *con_cls;
    ks_api_error err;
    if (!r) {
        if (!(r = calloc(1, sizeof *r))) return MHD_NO;
        r->h = h;
        r->conn = conn;
        r->refs = 1;
        r->fd = -1;
        *con_cls = r;
        atomic_fetch_add(&h->active, 1);
        ks_watchdog_set_waiting(&h->watchdog, conn, false);
        if (!admit(h, r, url, method, &err)) return refuse(h, r, &err);
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->phase != PHASE_UPLOAD) return MHD_YES; /* already answered: drain */
        /* MHD cannot answer in the middle of an upload: drain an oversized body (up to a bound, then drop
         * the connection) and answer 413 when it ends. */
        if (!take_upload(h, r, upload, n) && (r->drained += n) > 8 * h->params->max_body) return MHD_NO;
        return MHD_YES;
    }
    if (r->too_big && r->phase == PHASE_UPLOAD) {
        ks_api_fail(&err, 413, "invalid_request_error", "request_too_large", NULL,
                    "the request body is over the limit of %zu bytes", h->params->max_body);
        return refuse(h, r, &err);
    }
    if (r->phase == PHASE_RESPONDED) return MHD_YES;
    if (r->phase == PHASE_WAITING || r->phase == PHASE_STREAMING)
        return ks_http_completion(r, api_kind(r->route));
    if (!engine_route(r->route)) r->phase = PHASE_RESPONDED;
    return dispatch(h, r, url);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    ks_http *h = cls;
    http_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    ks_http_completion_closed(r, toe);
    atomic_fetch_sub(&h->active, 1);
    ks_watchdog_set_waiting(&h->watchdog, conn, true); /* a keep-alive connection waits for the next one */
}

static bool resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, bool *v6) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    if (getaddrinfo(host, ps, &hints, &ai) != 0 || !ai) return false;
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    return true;
}

kiln_status ks_http_start(ks_http *h) {
    const ks_server_params *p = h->params;
    struct sockaddr_storage ss;
    bool v6 = false;
    if (!resolve(p->host, (uint16_t)p->port, &ss, &v6)) {
        fprintf(stderr, "kiln serve: cannot resolve host '%s'\n", p->host);
        return KILN_E_INVALID_ARG;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME;
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES)
        flags |= MHD_USE_EPOLL;
    else if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES)
        flags |= MHD_USE_POLL;
    if (v6) flags |= MHD_USE_IPv6;
    if (p->verbose) flags |= MHD_USE_ERROR_LOG;
    int32_t limit = 2 * (p->engine.n_parallel + p->engine.max_queue) + 64;
    if (limit > 4096) limit = 4096;
    pthread_mutex_init(&h->watch_mu, NULL);
    if (!ks_watchdog_init(&h->watchdog, limit, p->timeout_s)) {
        fprintf(stderr, "kiln serve: out of memory for %d connection slots\n", limit);
        ks_http_stop(h);
        return KILN_E_NOMEM;
    }
    h->daemon = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->timeout_s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)limit, MHD_OPTION_NOTIFY_CONNECTION,
                                 ks_watchdog_notify, &h->watchdog, MHD_OPTION_END);
    if (!h->daemon) {
        ks_http_stop(h);
        fprintf(stderr, "kiln serve: cannot listen on %s:%d (in use, or not an address of this machine?)\n",
                p->host, p->port);
        return KILN_E_IO;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : (uint16_t)p->port;
    return KILN_OK;
}

void ks_http_stop(ks_http *h) {
    if (h->daemon) MHD_stop_daemon(h->daemon);
    h->daemon = NULL;
    ks_watchdog_free(&h->watchdog);
    pthread_mutex_destroy(&h->watch_mu);
}
