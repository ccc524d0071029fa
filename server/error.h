/*
 * error.h - server errors reach callers through kiln_last_error(), as every Kiln error does. The server
 * is linked with the static library and records its messages with the library's own kiln__error
 * (src/core/core.h), declared here so that server/ needs no include path into src/.
 */
#ifndef KILN_SERVER_ERROR_H
#define KILN_SERVER_ERROR_H

#include "kiln.h"

/* Record a formatted message for kiln_last_error() on this thread and return status. */
kiln_status kiln__error(kiln_status status, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prefix the thread's current message with context and return status. */
kiln_status kiln__error_prefix(kiln_status status, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
