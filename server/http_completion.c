/*
 * http_completion.c - one /v1/chat/completions or /v1/completions request between libmicrohttpd's thread
 * and the engine's.
 *
 * The body is parsed (api_request.c) and submitted; the engine then calls on_event on its own thread,
 * which records the event in the request's ks_api_result under the request's mutex.
 *  - Non-streaming: the connection is suspended after submit and resumed on DONE or ERROR, when the access
 *    handler runs again and answers with the whole response.
 *  - Every submitted request is on the server's watch list until MHD completes it. MHD does not watch a
 *    suspended connection's socket at all, so ks_http_check_hangups (every 100 ms, on the main thread)
 *    peeks at each suspended one: a client that has closed it is marked gone and its connection resumed,
 *    the access handler (non-streaming) or stream_read (streaming) ends the connection, and MHD's
 *    completion callback cancels the engine request, which the engine drops whether it is still queued
 *    or running.
 *  - Streaming: a 200 text/event-stream response is queued at once, produced by stream_read from the bytes
 *    each event appends; when there is nothing to send, stream_read suspends the connection and the next
 *    event resumes it. Suspending and resuming both happen under the mutex, so a resume never comes
 *    before its suspend.
 * A client that goes away (MHD's completion callback with any code but COMPLETED_OK, or a failed write)
 * cancels the engine request. The state is freed when MHD, the queued stream response, and the engine
 * (until its last event or the cancel) have all let go.
 */
#include "http.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

void ks_http_req_release(http_req *r) {
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    ks_api_result_destroy(r->res);
    ks_api_request_free(&r->api);
    if (r->mu_ready) pthread_mutex_destroy(&r->mu);
    free(r->out);
    free(r->body);
    free(r);
}

/* Whether the client has closed (or reset) its end of the socket. A request's body has been read whole
 * before it is submitted, so a readable end of stream means the client is gone; bytes of a pipelined next
 * request hide it until they are read. */
static bool socket_closed(int fd) {
    char b;
    if (fd < 0) return false;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void watch(http_req *r) {
    ks_http *h = r->h;
    atomic_fetch_add(&r->refs, 1); /* the list's */
    pthread_mutex_lock(&h->watch_mu);
    r->watch_next = h->watched;
    if (h->watched) h->watched->watch_prev = r;
    h->watched = r;
    r->watching = true;
    pthread_mutex_unlock(&h->watch_mu);
}

static void unwatch(http_req *r) {
    ks_http *h = r->h;
    pthread_mutex_lock(&h->watch_mu);
    bool was = r->watching;
    if (was) {
        if (r->watch_prev)
            r->watch_prev->watch_next = r->watch_next;
        else
            h->watched = r->watch_next;
        if (r->watch_next) r->watch_next->watch_prev = r->watch_prev;
        r->watch_prev = r->watch_next = NULL;
        r->watching = false;
    }
    pthread_mutex_unlock(&h->watch_mu);
    if (was) ks_http_req_release(r);
}

/* A suspended connection whose client left is resumed with client_gone set: the access handler (waiting)
 * or stream_read (streaming) then ends it, and MHD's completion callback cancels the engine request. */
void ks_http_check_hangups(ks_http *h) {
    pthread_mutex_lock(&h->watch_mu);
    for (http_req *r = h->watched; r; r = r->watch_next) {
        pthread_mutex_lock(&r->mu);
        if (r->suspended && !r->engine_done && socket_closed(r->fd)) {
            r->client_gone = true;
            r->suspended = false;
            MHD_resume_connection(r->conn);
        }
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&h->watch_mu);
}

/* The engine's callback (engine thread). */
static void on_event(void *user, const ks_event *ev) {
    http_req *r = user;
    bool last = ev->kind == KS_EVENT_DONE || ev->kind == KS_EVENT_ERROR, release = false;
    pthread_mutex_lock(&r->mu);
    if (!r->engine_done) {
        if (!ks_api_result_event(r->res, ev, r->api.stream ? &r->out : NULL, &r->out_len)) r->oom = true;
        if (last) r->engine_done = true;
        if (r->suspended && (r->api.stream || last)) {
            r->suspended = false;
            MHD_resume_connection(r->conn);
        }
    }
    if (last && r->engine_ref) {
        r->engine_ref = false;
        release = true;
    }
    pthread_mutex_unlock(&r->mu);
    if (release) ks_http_req_release(r);
}

/* Cancel an unfinished engine request (MHD thread) and drop the engine's reference. */
static void cancel(http_req *r) {
    pthread_mutex_lock(&r->mu);
    bool running = r->submitted && !r->engine_done;
    r->engine_done = true;
    r->suspended = false;
    pthread_mutex_unlock(&r->mu);
    if (running) ks_engine_cancel(r->h->engine, r->handle); /* no event comes after this returns */
    pthread_mutex_lock(&r->mu);
    bool release = r->engine_ref;
    r->engine_ref = false;
    pthread_mutex_unlock(&r->mu);
    if (release) ks_http_req_release(r);
}

void ks_http_completion_closed(http_req *r, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    if (r->mu_ready) cancel(r);
    unwatch(r);
    ks_http_req_release(r);
}

/* MHD's content reader for a stream. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    http_req *r = cls;
    ssize_t n = 0;
    pthread_mutex_lock(&r->mu);
    if (r->client_gone) {
        n = MHD_CONTENT_READER_END_WITH_ERROR; /* MHD closes the connection; its completion cancels */
    } else if (r->out_sent < r->out_len) {
        size_t k = r->out_len - r->out_sent < max ? r->out_len - r->out_sent : max;
        memcpy(buf, r->out + r->out_sent, k);
        r->out_sent += k;
        if (r->out_sent == r->out_len) {
            free(r->out);
            r->out = NULL;
            r->out_len = r->out_sent = 0;
        }
        n = (ssize_t)k;
    } else if (r->engine_done) {
        n = r->oom ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void stream_free(void *cls) {
    ks_http_req_release(cls);
}

static MHD_Result start_stream(http_req *r) {
    atomic_fetch_add(&r->refs, 1); /* the response's */
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, r, stream_free);
    if (!resp) {
        ks_http_req_release(r);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no"); /* nginx: pass events on at once */
    MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* The answer of a finished non-streaming request. */
static MHD_Result respond_result(http_req *r) {
    ks_api_error err;
    r->phase = PHASE_RESPONDED;
    const char *msg = ks_api_result_error(r->res);
    if (r->oom)
        ks_api_fail(&err, 500, "server_error", NULL, NULL, "out of memory while building the response");
    else if (msg && strstr(msg, "shutting down"))
        ks_api_fail(&err, 503, "server_error", "shutting_down", NULL, "%s", msg);
    else if (msg)
        ks_api_fail(&err, 500, "server_error", NULL, NULL, "%s", msg);
    else
        return ks_http_respond(r->conn, 200, "application/json", ks_api_result_json(r->res), NULL, NULL);
    return ks_http_respond_error(r->h, r->conn, &err);
}

static void submit_error(kiln_status st, ks_api_error *err) {
    const char *msg = kiln_last_error();
    switch (st) {
    case KILN_E_RANGE:
        ks_api_fail(err, 429, "rate_limit_error", "queue_full", NULL, "the server is busy (%s); retry later",
                    msg);
        break;
    case KILN_E_CONTEXT_FULL:
        ks_api_fail(err, 400, "invalid_request_error", "context_length_exceeded", NULL, "%s", msg);
        break;
    case KILN_E_INVALID_ARG: ks_api_bad(err, NULL, "%s", msg); break;
    case KILN_E_UNSUPPORTED:
        ks_api_fail(err, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        break;
    default:
        ks_api_fail(err, 500, "server_error", NULL, NULL, "submitting the request failed: %s", msg);
        break;
    }
}

static MHD_Result refuse(http_req *r, const ks_api_error *err) {
    atomic_fetch_add(&r->h->rejected, 1);
    r->phase = PHASE_RESPONDED;
    return ks_http_respond_error(r->h, r->conn, err);
}

static MHD_Result submit(http_req *r, ks_api_kind kind) {
    ks_http *h = r->h;
    ks_api_error err;
    if (!ks_api_parse(kind, r->body, r->len, &h->model, &r->api, &err)) return refuse(r, &err);
    r->res =
        ks_api_result_create(&r->api, &h->model, atomic_fetch_add(&h->next_id, 1) + 1, (int64_t)time(NULL));
    if (!r->res || pthread_mutex_init(&r->mu, NULL) != 0) {
        ks_api_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
        return refuse(r, &err);
    }
    r->mu_ready = true;
    r->engine_ref = true;
    atomic_fetch_add(&r->refs, 1);
    kiln_status st = ks_engine_submit(h->engine, &r->api.req, on_event, r, &r->handle);
    if (st != KILN_OK) {
        r->engine_ref = false;
        atomic_fetch_sub(&r->refs, 1);
        submit_error(st, &err);
        return refuse(r, &err);
    }
    r->submitted = true;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    watch(r);
    if (r->api.stream) {
        r->phase = PHASE_STREAMING;
        return start_stream(r);
    }
    r->phase = PHASE_WAITING;
    pthread_mutex_lock(&r->mu);
    bool done = r->engine_done;
    if (!done) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
    pthread_mutex_unlock(&r->mu);
    return done ? respond_result(r) : MHD_YES;
}

MHD_Result ks_http_completion(http_req *r, ks_api_kind kind) {
    if (r->phase == PHASE_UPLOAD) return submit(r, kind);
    if (r->phase != PHASE_WAITING) return MHD_YES;
    pthread_mutex_lock(&r->mu);
    bool gone = r->client_gone, done = r->engine_done;
    if (!done && !gone) { /* resumed early: wait again */
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
    pthread_mutex_unlock(&r->mu);
    if (done) return respond_result(r);
    if (!gone) return MHD_YES;
    cancel(r);
    return MHD_NO; /* drop the connection: its client is gone */
}
