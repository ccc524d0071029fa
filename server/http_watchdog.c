/*
 * http_watchdog.c - see http_watchdog.h.
 */
#include "http_watchdog.h"

#include <stdlib.h>
#include <sys/socket.h>

bool ks_watchdog_init(ks_watchdog *w, int32_t n_connections, int32_t timeout_s) {
    w->slots = calloc((size_t)n_connections, sizeof *w->slots);
    w->n = w->slots ? n_connections : 0;
    w->timeout_s = timeout_s;
    pthread_mutex_init(&w->mu, NULL);
    return w->slots != NULL;
}

void ks_watchdog_free(ks_watchdog *w) {
    free(w->slots);
    w->slots = NULL;
    w->n = 0;
    pthread_mutex_destroy(&w->mu);
}

void ks_watchdog_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode code) {
    ks_watchdog *w = cls;
    ks_watch_slot *slot = *socket_context;
    pthread_mutex_lock(&w->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        for (int32_t i = 0; info && i < w->n && !slot; i++)
            if (!w->slots[i].used) slot = &w->slots[i];
        if (slot) { /* no free slot cannot happen (one per connection MHD accepts); then it goes unwatched */
            slot->used = true;
            slot->waiting = true;
            slot->fd = (int)info->connect_fd;
            clock_gettime(CLOCK_MONOTONIC, &slot->since);
        }
        *socket_context = slot;
    } else if (slot) {
        slot->used = false;
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&w->mu);
}

void ks_watchdog_set_waiting(ks_watchdog *w, struct MHD_Connection *conn, bool waiting) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    ks_watch_slot *slot = info ? info->socket_context : NULL;
    if (!slot) return;
    pthread_mutex_lock(&w->mu);
    slot->waiting = waiting;
    clock_gettime(CLOCK_MONOTONIC, &slot->since);
    pthread_mutex_unlock(&w->mu);
}

int32_t ks_watchdog_reap(ks_watchdog *w) {
    struct timespec now;
    int32_t n = 0;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&w->mu);
    for (int32_t i = 0; i < w->n; i++) {
        ks_watch_slot *s = &w->slots[i];
        double waited =
            (double)(now.tv_sec - s->since.tv_sec) + (double)(now.tv_nsec - s->since.tv_nsec) / 1e9;
        if (s->used && s->waiting && waited > (double)w->timeout_s) {
            shutdown(s->fd, SHUT_RDWR);
            s->waiting = false; /* once: MHD closes it and the slot is freed on its CLOSED notification */
            n++;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return n;
}
