/*
 * threadpool.h - a persistent pool of worker threads for the CPU backend.
 *
 * kiln__pool_run(pool, fn, arg) runs fn(arg, ith, nth) once on each of nth threads (the caller is
 * thread 0) and returns when all have finished. Inside fn, kiln__pool_barrier() waits until every thread
 * of the job reaches the same barrier: a whole graph runs as one job with a barrier between nodes, so no
 * thread is created or woken per op. Waiting spins for a few microseconds, then sleeps (a futex on
 * Linux), so a busy machine's cores go to threads that have work.
 *
 * nth is the pool's size, or fewer: when the pool measures that its threads spend their time waiting for
 * each other (the machine is not giving it all of its cores), it runs the next jobs on fewer threads, and
 * tries the full size again now and then. So fn must split its work by the nth it is given, and its
 * results must not depend on nth. kiln__pool_size() is the most any job gets (for sizing scratch).
 *
 * Thread safety: one thread at a time calls kiln__pool_run on a pool (jobs do not nest);
 * kiln__pool_barrier is called only from inside a job, by every thread of it.
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
