/*
 * server.h - `kiln serve`: the HTTP server (http.c) over the serving engine (engine.h). The CLI parses
 * its options into ks_server_params and calls ks_server_run, which returns when SIGTERM or SIGINT has
 * shut the server down (0) or when it could not start (non-zero, with a message on stderr).
 */
#ifndef KILN_SERVER_H
#define KILN_SERVER_H

#include "engine.h"

typedef struct ks_server_params {
    const char *model_path;
    const char *draft_model_path; /* --model-draft: a draft model for speculative decoding; NULL: none */
    const char *host;          /* default "127.0.0.1" */
    int port;                  /* default 8080 */
    const char *api_key;       /* NULL: no key */
    int32_t n_threads;         /* model threads; 0 = default */
    size_t max_body;           /* request body limit in bytes; default 1 MiB */
    int32_t timeout_s;         /* read and idle timeout; default 30 */
    int32_t grace_ms;          /* SIGTERM grace period; default 10000 */
    const char *devices;       /* kiln_model_params.devices */
    bool verbose;
    const char *slot_save_path; /* folder of /slots/{id}?action=save|restore files; NULL: those are 501 */
    const char *prefix_cache_dir; /* the prefix cache saved here at shutdown, restored at start; NULL: not */
    ks_engine_params engine;
} ks_server_params;

ks_server_params ks_server_params_default(void);
int ks_server_run(const ks_server_params *params);

#endif
