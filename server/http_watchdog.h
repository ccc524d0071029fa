/*
 * http_watchdog.h - drops clients that take longer than the timeout to send a request (slowloris).
 *
 * libmicrohttpd's connection timeout counts idle time only, so a client that sends one byte a second is
 * never idle and could hold a connection forever. Each connection gets a slot when it opens (MHD's
 * connection notification). The slot is "waiting" from then until the request handler first sees a
 * request, and again from the end of each request (keep-alive). The server's main loop calls
 * ks_watchdog_reap every 100 ms: a connection waiting longer than the timeout has its socket shut down
 * (not closed: MHD owns it), so MHD reads the end of the stream and closes the connection itself.
 */
#ifndef KILN_SERVER_HTTP_WATCHDOG_H
#define KILN_SERVER_HTTP_WATCHDOG_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

typedef struct ks_watch_slot {
    int fd;
    bool used, waiting;
    struct timespec since; /* when it started waiting (CLOCK_MONOTONIC) */
} ks_watch_slot;

typedef struct ks_watchdog {
    pthread_mutex_t mu;
    ks_watch_slot *slots; /* [n]: one per connection MHD may hold */
    int32_t n;
    int32_t timeout_s;
} ks_watchdog;

bool ks_watchdog_init(ks_watchdog *w, int32_t n_connections, int32_t timeout_s);
void ks_watchdog_free(ks_watchdog *w);
/* MHD_OPTION_NOTIFY_CONNECTION's callback; cls is the watchdog. */
void ks_watchdog_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode code);
/* The connection's request has arrived (waiting = false) or has ended (waiting again, from now). */
void ks_watchdog_set_waiting(ks_watchdog *w, struct MHD_Connection *conn, bool waiting);
/* Shut down the sockets of connections that have waited longer than the timeout; returns how many. */
int32_t ks_watchdog_reap(ks_watchdog *w);

#endif
