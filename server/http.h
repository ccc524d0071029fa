/*
 * http.h - the HTTP side of `kiln serve`, internal to server/: the daemon and its routes (http.c), the
 * life of one completion request across the MHD and engine threads (http_completion.c), and the server's
 * start-up and shutdown around them (server.c).
 *
 * Threads: libmicrohttpd runs every connection on its one internal polling thread; the engine calls back
 * on its own thread. A completion request's state (http_req) is shared by both, guarded by its mutex and
 * freed by whichever of the two lets go last (a reference count: MHD's, and the engine's until its last
 * event or a cancel).
 */
#ifndef KILN_SERVER_HTTP_H
#define KILN_SERVER_HTTP_H

#include "api.h"
#include "http_watchdog.h"
#include "server.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#if MHD_VERSION < 0x00097002
typedef int MHD_Result;
#else
typedef enum MHD_Result MHD_Result;
#endif

typedef enum ks_state { KS_STATE_LOADING = 0, KS_STATE_READY = 1, KS_STATE_STOPPING = 2 } ks_state;

typedef struct ks_http {
    const ks_server_params *params;
    struct MHD_Daemon *daemon;
    _Atomic int state;         /* ks_state */
    ks_engine *engine;         /* set before state becomes READY */
    ks_api_model model;        /* filled before state becomes READY */
    _Atomic uint64_t next_id;  /* response ids */
    _Atomic uint64_t rejected; /* completion requests refused before the engine saw them */
    _Atomic int active;        /* requests whose connection has not completed */
    uint16_t port;             /* the bound port (the chosen one when params->port is 0) */
    ks_watchdog watchdog;      /* drops clients too slow to send a request */
    pthread_mutex_t watch_mu;  /* guards the list below */
    struct http_req *watched;  /* submitted requests whose sockets ks_http_check_hangups watches */
} ks_http;

typedef enum req_phase {
    PHASE_UPLOAD = 0, /* receiving the body */
    PHASE_WAITING,    /* submitted, non-streaming: suspended until the engine is done */
    PHASE_STREAMING,  /* submitted, the SSE response queued */
    PHASE_RESPONDED,  /* a response has been queued */
} req_phase;

/* One HTTP request (MHD's con_cls), from its first header to MHD's completion callback. */
typedef struct http_req {
    ks_http *h;
    struct MHD_Connection *conn;
    req_phase phase;
    int route;         /* index into http.c's route table, or -1 */
    const char *allow; /* the Allow header of a 405 */
    char *body;        /* (len) the upload, NUL-terminated */
    size_t len, cap;
    bool too_big;   /* the upload passed params->max_body */
    size_t drained; /* bytes of an oversized upload thrown away */

    /* Completion requests: shared with the engine thread under mu. */
    pthread_mutex_t mu;
    _Atomic int refs;
    bool mu_ready;
    ks_api_request api;
    ks_api_result *res;
    ks_handle handle;
    bool submitted;
    bool engine_ref;  /* the engine holds a reference (until its last event, or the cancel) */
    bool engine_done; /* DONE or ERROR arrived, or the request was cancelled */
    bool suspended;   /* the connection is suspended waiting for the engine */
    bool client_gone; /* the socket was seen closed while suspended */
    bool oom;         /* building an event's output failed */
    char *out;        /* (out_len) stream bytes not yet handed to MHD, from out_sent */
    size_t out_len, out_sent;
    int fd; /* the connection's socket, for the hang-up check */
    /* Under h->watch_mu: the list of submitted requests (holding a reference) until MHD completes them. */
    struct http_req *watch_prev, *watch_next;
    bool watching;
} http_req;

/* http_slots.c: POST /slots/{id}?action=save|restore|erase */
MHD_Result ks_http_slots(ks_http *h, http_req *r, const char *url);

/* http.c */
MHD_Result ks_http_respond(struct MHD_Connection *conn, unsigned status, const char *type, char *body,
                           const char *h1, const char *v1);
MHD_Result ks_http_respond_error(ks_http *h, struct MHD_Connection *conn, const ks_api_error *err);
kiln_status ks_http_start(ks_http *h);
void ks_http_stop(ks_http *h);

/* http_completion.c: the final access-handler call of a completion request, and every later one (after a
 * resume). */
MHD_Result ks_http_completion(http_req *r, ks_api_kind kind);
/* MHD's completion callback for a request: cancels an unfinished engine request, drops MHD's reference. */
void ks_http_completion_closed(http_req *r, enum MHD_RequestTerminationCode toe);
void ks_http_req_release(http_req *r);
/* Cancel the engine requests whose clients have closed their sockets while their connections were
 * suspended (queued or generating, streaming or not), which MHD does not watch; called every 100 ms by
 * the server's main thread. */
void ks_http_check_hangups(ks_http *h);

/* The embedded chat page (generated from page.html at build time by embed.cmake). */
extern const unsigned char ks_page_html[];
extern const size_t ks_page_html_len;

#endif
