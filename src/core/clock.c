/*
 * clock.c - the one monotonic clock every layer times itself with (core.h).
 */
#include "core/core.h"

#include <time.h>

uint64_t kiln__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
