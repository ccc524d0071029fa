/*
 * status.c - status names and the per-thread error message behind kiln_last_error().
 *
 * Each failing call formats one message naming what was wrong; callers higher up may prefix context
 * ("loading 'm.gguf': "). The buffer is thread-local so concurrent contexts do not mix their messages.
 */
#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ERROR_CAP 1024

static _Thread_local char error_message[ERROR_CAP];

const char *kiln_status_name(kiln_status status) {
    switch (status) {
    case KILN_OK: return "KILN_OK";
    case KILN_E_INVALID_ARG: return "KILN_E_INVALID_ARG";
    case KILN_E_NOMEM: return "KILN_E_NOMEM";
    case KILN_E_IO: return "KILN_E_IO";
    case KILN_E_FORMAT: return "KILN_E_FORMAT";
    case KILN_E_UNSUPPORTED: return "KILN_E_UNSUPPORTED";
    case KILN_E_CONTEXT_FULL: return "KILN_E_CONTEXT_FULL";
    case KILN_E_NOT_FOUND: return "KILN_E_NOT_FOUND";
    case KILN_E_RANGE: return "KILN_E_RANGE";
    case KILN_E_INTERNAL: return "KILN_E_INTERNAL";
    case KILN_E_ABORTED: return "KILN_E_ABORTED";
    }
    return "KILN_E_UNKNOWN";
}

const char *kiln_last_error(void) { return error_message; }

void kiln__error_clear(void) { error_message[0] = '\0'; }

kiln_status kiln__error(kiln_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    return status;
}

kiln_status kiln__error_prefix(kiln_status status, const char *fmt, ...) {
    char prefix[ERROR_CAP];
    char old[ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t n;
    memcpy(old, error_message, sizeof old);
    n = strlen(prefix);
    memcpy(error_message, prefix, n + 1);
    if (n + 1 < sizeof error_message) {
        size_t room = sizeof error_message - n - 1;
        size_t m = strnlen(old, room);
        memcpy(error_message + n, old, m);
        error_message[n + m] = '\0';
    }
    return status;
}

kiln_status kiln__nomem(const char *what) {
    return kiln__error(KILN_E_NOMEM, "out of memory while allocating %s", what);
}
