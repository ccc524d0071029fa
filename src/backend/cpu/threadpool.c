/*
 * threadpool.c - see threadpool.h.
 *
 * Job hand-off: the caller bumps `generation` under the mutex and broadcasts; each worker that sees a new
 * generation runs the job and increments `done`. The barrier is sense-reversing: the last thread to
 * arrive resets the count and flips `phase`; the others wait for the flip.
 */
#include "backend/cpu/threadpool.h"

#include "core/core.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define SPIN_BEFORE_YIELD 2048

typedef struct worker {
    kiln_pool *pool;
    pthread_t thread;
    int ith;
} worker;

struct kiln_pool {
    int n_threads;
    worker *workers; /* [n_threads - 1]; the caller is thread 0 */
    int n_started;
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    uint64_t generation; /* guarded by mutex */
    bool stop;           /* guarded by mutex */
    kiln_pool_fn fn;
    void *arg;
    atomic_int done;
    atomic_int arrived;
    atomic_int phase;
};

static void wait_until(atomic_int *v, int value) {
    for (int spins = 0; atomic_load_explicit(v, memory_order_acquire) != value; spins++)
        if (spins > SPIN_BEFORE_YIELD) sched_yield();
}

static void *worker_main(void *p) {
    worker *w = p;
    kiln_pool *pool = w->pool;
    uint64_t seen = 0;
    for (;;) {
        kiln_pool_fn fn;
        void *arg;
        pthread_mutex_lock(&pool->mutex);
        while (pool->generation == seen && !pool->stop) pthread_cond_wait(&pool->wake, &pool->mutex);
        if (pool->stop) {
            pthread_mutex_unlock(&pool->mutex);
            return NULL;
        }
        seen = pool->generation;
        fn = pool->fn;
        arg = pool->arg;
        pthread_mutex_unlock(&pool->mutex);
        fn(arg, w->ith, pool->n_threads);
        atomic_fetch_add_explicit(&pool->done, 1, memory_order_acq_rel);
    }
}

kiln_status kiln__pool_create(int n_threads, kiln_pool **out) {
    kiln_pool *pool;
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return kiln__error(KILN_E_INVALID_ARG, "thread count %d out of range 1..1024", n_threads);
    pool = kiln__calloc(1, sizeof *pool);
    if (!pool) return kiln__nomem("a thread pool");
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    if (n_threads > 1) {
        pool->workers = kiln__calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            kiln__pool_destroy(pool);
            return kiln__nomem("thread pool workers");
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        pool->workers[i].pool = pool;
        pool->workers[i].ith = i + 1;
        if (pthread_create(&pool->workers[i].thread, NULL, worker_main, &pool->workers[i]) != 0) {
            kiln__pool_destroy(pool);
            return kiln__error(KILN_E_NOMEM, "could not start worker thread %d of %d", i + 1, n_threads);
        }
        pool->n_started++;
    }
    *out = pool;
    return KILN_OK;
}

void kiln__pool_destroy(kiln_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mutex);
    pool->stop = true;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (int i = 0; i < pool->n_started; i++) pthread_join(pool->workers[i].thread, NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_mutex_destroy(&pool->mutex);
    kiln__dealloc(pool->workers);
    kiln__dealloc(pool);
}

int kiln__pool_size(const kiln_pool *pool) { return pool->n_threads; }

void kiln__pool_run(kiln_pool *pool, kiln_pool_fn fn, void *arg) {
    if (pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    atomic_store(&pool->done, 0);
    pthread_mutex_lock(&pool->mutex);
    pool->fn = fn;
    pool->arg = arg;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    fn(arg, 0, pool->n_threads);
    wait_until(&pool->done, pool->n_threads - 1);
}

void kiln__pool_barrier(kiln_pool *pool) {
    int phase;
    if (pool->n_threads == 1) return;
    phase = atomic_load_explicit(&pool->phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&pool->arrived, 1, memory_order_acq_rel) == pool->n_threads - 1) {
        atomic_store_explicit(&pool->arrived, 0, memory_order_relaxed);
        atomic_store_explicit(&pool->phase, phase ^ 1, memory_order_release);
        return;
    }
    wait_until(&pool->phase, phase ^ 1);
}
