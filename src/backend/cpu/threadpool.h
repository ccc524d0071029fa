/*
 * threadpool.h - a persistent pool of worker threads for the CPU backend.
 *
 * kiln__pool_run(pool, fn, arg) runs fn(arg, ith, nth) once on each of the nth threads (the caller is
 * thread 0) and returns when all have finished. Inside fn, kiln__pool_barrier() waits until every thread
 * reaches the same barrier: a whole graph runs as one job with a barrier between nodes, so no thread is
 * created or woken per op. Waiting spins briefly, then yields; idle workers sleep on a condition variable.
 */
#ifndef KILN_THREADPOOL_H
#define KILN_THREADPOOL_H

#include "kiln.h"

typedef struct kiln_pool kiln_pool;
typedef void (*kiln_pool_fn)(void *arg, int ith, int nth);

kiln_status kiln__pool_create(int n_threads, kiln_pool **out);
void kiln__pool_destroy(kiln_pool *pool);
int kiln__pool_size(const kiln_pool *pool);
void kiln__pool_run(kiln_pool *pool, kiln_pool_fn fn, void *arg);
void kiln__pool_barrier(kiln_pool *pool);

#endif
