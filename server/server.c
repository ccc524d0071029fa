/*
 * server.c - ks_server_run: the life of `kiln serve`.
 *
 * The HTTP listener starts first, so that /health answers 503 {"status": "loading"} (and the API 503)
 * while a loader thread maps the model, recognizes its chat template (falling back to "plain") and starts
 * the engine; then "listening on http://HOST:PORT" goes to stderr and /health turns 200. SIGTERM and SIGINT
 * are blocked in every thread and taken by the main thread: it stops accepting connections (requests on
 * open connections get 503), lets running requests finish for params->grace_ms (ks_engine_shutdown cancels
 * the rest), waits a little for their responses to be written, stops the daemon, and returns 0.
 */
#include "http.h"
#include "persist.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

ks_server_params ks_server_params_default(void) {
    ks_server_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.max_body = 1u << 20;
    p.timeout_s = 30;
    p.grace_ms = 10000;
    p.engine = ks_engine_params_default();
    return p;
}

typedef struct loader {
    ks_http *h;
    kiln_model *model;
    kiln_model *draft;    /* --model-draft */
    _Atomic int finished; /* 1 loaded, -1 failed */
} loader;

static void log_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "kiln: %s\n", line);
}

static const kiln_chat_template *choose_template(const kiln_model *model) {
    const kiln_chat_template *t = NULL;
    kiln_status st = kiln_chat_template_detect(kiln_model_gguf(model), &t);
    if (st == KILN_E_UNSUPPORTED)
        fprintf(stderr, "kiln serve: %s; using the 'plain' template\n", kiln_last_error());
    return st == KILN_OK && t ? t : kiln_chat_template_by_name("plain");
}

static void describe_model(ks_http *h, kiln_model *model, const ks_engine_params *ep) {
    const char *path = h->params->model_path, *slash = strrchr(path, '/');
    ks_api_model *m = &h->model;
    m->id = slash ? slash + 1 : path;
    m->vocab = kiln_model_vocab(model);
    m->tmpl = choose_template(model);
    const char *eot = kiln_chat_template_end_of_turn(m->tmpl);
    m->eot_token = eot ? kiln_vocab_find_token(m->vocab, eot, strlen(eot)) : -1;
    m->n_ctx_train = kiln_model_n_ctx_train(model);
    m->n_ctx = ep->n_ctx;
    if (m->n_ctx_train > 0 && m->n_ctx > m->n_ctx_train) m->n_ctx = m->n_ctx_train;
    m->max_tokens_cap =
        ep->max_tokens_cap > 0 && ep->max_tokens_cap < m->n_ctx ? ep->max_tokens_cap : m->n_ctx;
    m->default_max_tokens = m->max_tokens_cap;
    m->embeddings = !kiln_model_is_causal(model);
    m->n_embd = kiln_model_n_embd(model);
    m->created = (int64_t)time(NULL);
}

static void *load(void *arg) {
    loader *l = arg;
    ks_http *h = l->h;
    const ks_server_params *p = h->params;
    kiln_model_params mp = kiln_model_params_default();
    mp.n_threads = p->n_threads;
    mp.devices = p->devices;
    kiln_status st = kiln_model_load_ex(p->model_path, &mp, &l->model);
    if (st != KILN_OK) {
        fprintf(stderr, "kiln serve: loading '%s': %s\n", p->model_path, kiln_last_error());
        atomic_store(&l->finished, -1);
        return NULL;
    }
    /* The same one line as kiln run's when a named device could not start and the CPU runs instead. */
    if (kiln_model_device_note(l->model)) fprintf(stderr, "kiln serve: note: %s\n", kiln_model_device_note(l->model));
    ks_engine_params ep = p->engine;
    if (p->draft_model_path) {
        if ((st = kiln_model_load_ex(p->draft_model_path, &mp, &l->draft)) != KILN_OK) {
            fprintf(stderr, "kiln serve: loading the draft model '%s': %s\n", p->draft_model_path,
                    kiln_last_error());
            atomic_store(&l->finished, -1);
            return NULL;
        }
        ep.draft_model = l->draft;
    }
    if (p->verbose && !ep.log) ep.log = log_line;
    describe_model(h, l->model, &ep);
    if ((st = ks_engine_create(l->model, &ep, &h->engine)) != KILN_OK) {
        fprintf(stderr, "kiln serve: starting the engine: %s\n", kiln_last_error());
        atomic_store(&l->finished, -1);
        return NULL;
    }
    if (p->prefix_cache_dir) ks_persist_restore(h->engine, p->prefix_cache_dir);
    int expected = KS_STATE_LOADING;
    if (atomic_compare_exchange_strong(&h->state, &expected, KS_STATE_READY))
        fprintf(stderr, "kiln serve: model '%s' (%s%s, %d context); listening on http://%s%s%s:%u\n",
                h->model.id, h->model.embeddings ? "encoder, /v1/embeddings" : kiln_chat_template_name(h->model.tmpl),
                h->model.embeddings ? "" : " template", h->model.n_ctx,
                strchr(p->host, ':') ? "[" : "", p->host, strchr(p->host, ':') ? "]" : "", h->port);
    atomic_store(&l->finished, 1);
    return NULL;
}

/* Wait for SIGTERM/SIGINT (returns true) or a failed load (false). */
static bool wait_for_signal(loader *l, const sigset_t *set) {
    struct timespec tick = {0, 100 * 1000 * 1000};
    for (;;) {
        int sig = sigtimedwait(set, NULL, &tick);
        if (sig == SIGTERM || sig == SIGINT) {
            fprintf(stderr, "kiln serve: %s received, shutting down\n",
                    sig == SIGTERM ? "SIGTERM" : "SIGINT");
            return true;
        }
        if (atomic_load(&l->finished) < 0) return false;
        ks_watchdog_reap(&l->h->watchdog);
        ks_http_check_hangups(l->h);
    }
}

/* Take the signals that came while shutting down (a second SIGTERM from an impatient operator), so that
 * unblocking them does not kill the process with the default action. */
static void drain_signals(const sigset_t *set) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(set, NULL, &zero) > 0) {
    }
}

static void shut_down(ks_http *h, pthread_t thread, const ks_server_params *p) {
    atomic_store(&h->state, KS_STATE_STOPPING);
    MHD_socket listen_fd = MHD_quiesce_daemon(h->daemon);
    if (listen_fd != MHD_INVALID_SOCKET) close(listen_fd);
    pthread_join(thread, NULL);
    if (h->engine) ks_engine_shutdown(h->engine, p->grace_ms);
    /* Let the last responses and stream events reach their clients. */
    for (int i = 0; i < 50 && atomic_load(&h->active) > 0; i++)
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    ks_http_stop(h);
}

int ks_server_run(const ks_server_params *params) {
    static ks_http server; /* one per process: signals are process-wide */
    ks_http *h = &server;
    memset(h, 0, sizeof *h);
    h->params = params;
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, &old); /* before any thread starts, so that all inherit it */
    signal(SIGPIPE, SIG_IGN);
    if (ks_http_start(h) != KILN_OK) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return 1;
    }
    fprintf(stderr, "kiln serve: loading '%s' (http://%s:%u answers 503 until it is ready)\n",
            params->model_path, params->host, h->port);
    loader l = {.h = h};
    pthread_t thread;
    if (pthread_create(&thread, NULL, load, &l) != 0) {
        fprintf(stderr, "kiln serve: cannot start the loader thread: %s\n", strerror(errno));
        ks_http_stop(h);
        return 1;
    }
    bool signalled = wait_for_signal(&l, &set);
    shut_down(h, thread, params);
    if (h->engine && params->prefix_cache_dir) ks_persist_save(h->engine, params->prefix_cache_dir);
    ks_engine_destroy(h->engine);
    kiln_model_destroy(l.draft);
    kiln_model_destroy(l.model);
    drain_signals(&set);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return signalled ? 0 : 1;
}
