/*
 * test_threadpool.c - the CPU backend's thread pool: every job runs once on each of its threads, threads
 * pass barriers in step (nobody leaves a barrier before all have arrived, and what was written before it
 * is seen after it), waits that go to sleep (a slow thread at a barrier, a pause between jobs) are always
 * woken, an oversubscribed pool and a pool beside a thread that hogs a core finish promptly, pools are
 * created and destroyed repeatedly, and bad thread counts are rejected.
 *
 * The pool may run a job on fewer threads than it has (when the machine does not give it all of them),
 * so the checks use the nth each job is given and check only that it is between 1 and the pool's size.
 */
#include "harness.h"

#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define MAX_THREADS 8
#define MAX_PHASES 32

typedef struct step_job {
    kiln_pool *pool;
    int phases;
    int slow_phase_every; /* 0, or make one thread sleep before every k-th phase */
    atomic_int runs[MAX_THREADS];   /* times fn ran with each ith */
    atomic_int arrived[MAX_PHASES]; /* threads that reached each phase's barrier */
    atomic_int nth;                 /* the nth the job was given (all threads must agree) */
    atomic_int errors;
    int slot[MAX_THREADS]; /* each thread's current phase, written before a barrier and read after */
} step_job;

static void sleep_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Each phase: write my slot, count in, barrier; then everyone must have counted in and every slot must
 * hold this phase; a second barrier keeps the slots until all have read them. */
static void step(void *arg, int ith, int nth) {
    step_job *j = arg;
    int expected = 0;
    if (ith < 0 || ith >= nth || nth > MAX_THREADS) {
        atomic_fetch_add(&j->errors, 1);
        return;
    }
    atomic_fetch_add(&j->runs[ith], 1);
    if (!atomic_compare_exchange_strong(&j->nth, &expected, nth) && expected != nth)
        atomic_fetch_add(&j->errors, 1);
    for (int p = 0; p < j->phases; p++) {
        if (j->slow_phase_every && p % j->slow_phase_every == 0 && ith == p % nth) sleep_us(200);
        j->slot[ith] = p;
        atomic_fetch_add(&j->arrived[p], 1);
        kiln__pool_barrier(j->pool);
        if (atomic_load(&j->arrived[p]) != nth) atomic_fetch_add(&j->errors, 1);
        for (int k = 0; k < nth; k++)
            if (j->slot[k] != p) atomic_fetch_add(&j->errors, 1);
        kiln__pool_barrier(j->pool);
    }
}

/* Run one step job on the pool and check it; returns the nth it ran with. */
static int run_steps(kiln_pool *pool, int phases, int slow_phase_every) {
    static step_job j;
    int nth;
    memset(&j, 0, sizeof j);
    j.pool = pool;
    j.phases = phases;
    j.slow_phase_every = slow_phase_every;
    kiln__pool_run(pool, step, &j);
    nth = atomic_load(&j.nth);
    CHECK(nth >= 1 && nth <= kiln__pool_size(pool));
    for (int i = 0; i < MAX_THREADS; i++) CHECK_EQ_INT(atomic_load(&j.runs[i]), i < nth ? 1 : 0);
    CHECK_EQ_INT(atomic_load(&j.errors), 0);
    return nth;
}

/* Many jobs on one pool, so that a pool which narrows (these jobs are all barriers and no work, which
 * one thread does fastest) also tries a wider width again within the 300 jobs. */
static void threads_pass_barriers_in_step(void) {
    static const int sizes[] = {1, 2, 3, 8};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        kiln_pool *pool = NULL;
        int narrowest = sizes[s], widened = 0;
        CHECK_OK(kiln__pool_create(sizes[s], &pool));
        if (!pool) continue;
        CHECK_EQ_INT(kiln__pool_size(pool), sizes[s]);
        for (int job = 0; job < 300; job++) {
            int nth = run_steps(pool, MAX_PHASES, 0);
            if (nth < narrowest) narrowest = nth;
            else if (nth > narrowest) widened = 1;
        }
        if (narrowest < sizes[s]) CHECK(widened);
        printf("  %d threads: narrowest job %d threads%s\n", sizes[s], narrowest,
               widened ? ", and wider ones after it" : "");
        kiln__pool_destroy(pool);
    }
}

/* A thread that arrives late makes the others sleep at the barrier; a pause between jobs makes the
 * workers sleep between jobs. Both must be woken. The late threads would make a pool narrow after its
 * first few jobs, so each pool runs only a few and the sleeps happen at full width. */
static void sleeping_waits_are_woken(void) {
    static const int sizes[] = {2, 3, 8};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int wide = 0;
        for (int round = 0; round < 8; round++) {
            kiln_pool *pool = NULL;
            CHECK_OK(kiln__pool_create(sizes[s], &pool));
            if (!pool) continue;
            for (int job = 0; job < 5; job++) {
                wide += run_steps(pool, 8, 4) == sizes[s];
                if (job % 2 == 0) sleep_us(500);
            }
            kiln__pool_destroy(pool);
        }
        CHECK(wide > 0);
    }
}

/* Run `rounds` fresh pools of n_threads, each for 6 jobs of 16 phases (a pool runs its first jobs at
 * full width, before it has measured anything); returns the seconds taken. */
static double run_full_width_rounds(int n_threads, int rounds) {
    double t0 = seconds_now();
    for (int r = 0; r < rounds; r++) {
        kiln_pool *pool = NULL;
        CHECK_OK(kiln__pool_create(n_threads, &pool));
        if (!pool) return 0;
        for (int job = 0; job < 6; job++) run_steps(pool, 16, 0);
        kiln__pool_destroy(pool);
    }
    return seconds_now() - t0;
}

/* Eight threads on a machine with fewer cores must not take long: 9600 barriers at full width, and then
 * 500 jobs on one pool (which may narrow). */
static void oversubscribed_pool_finishes_promptly(void) {
    kiln_pool *pool = NULL;
    double t0, full, adaptive;
    full = run_full_width_rounds(8, 50);
    t0 = seconds_now();
    CHECK_OK(kiln__pool_create(8, &pool));
    if (!pool) return;
    for (int job = 0; job < 500; job++) run_steps(pool, 16, 0);
    kiln__pool_destroy(pool);
    adaptive = seconds_now() - t0;
    printf("  8 threads: 300 jobs x 32 barriers at full width %.3f s; 500 jobs on one pool %.3f s\n", full,
           adaptive);
    CHECK(full < 4.0);
    CHECK(adaptive < 2.0);
}

static void *hog(void *arg) {
    atomic_bool *stop = arg;
    while (!atomic_load_explicit(stop, memory_order_relaxed)) {
    }
    return NULL;
}

/* A thread of this process spins on a core for the whole test; jobs on two threads still finish. */
static void jobs_finish_beside_a_thread_that_hogs_a_core(void) {
    atomic_bool stop = false;
    pthread_t hogger;
    double elapsed;
    CHECK_EQ_INT(pthread_create(&hogger, NULL, hog, &stop), 0);
    elapsed = run_full_width_rounds(2, 50);
    atomic_store(&stop, true);
    pthread_join(hogger, NULL);
    printf("  2 threads beside a hog: 300 jobs x 32 barriers at full width %.3f s\n", elapsed);
    CHECK(elapsed < 4.0);
}

static void pools_are_created_and_destroyed_repeatedly(void) {
    for (int i = 0; i < 200; i++) {
        kiln_pool *pool = NULL;
        CHECK_OK(kiln__pool_create(1 + i % 4, &pool));
        if (!pool) continue;
        if (i % 2) run_steps(pool, 2, 0);
        kiln__pool_destroy(pool);
    }
    kiln__pool_destroy(NULL);
}

static void bad_thread_counts_are_rejected(void) {
    kiln_pool *pool = (kiln_pool *)&pool;
    CHECK_STATUS(kiln__pool_create(0, &pool), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("thread count 0");
    CHECK(pool == NULL);
    CHECK_STATUS(kiln__pool_create(1025, &pool), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("thread count 1025");
}

int main(void) {
    RUN(threads_pass_barriers_in_step);
    RUN(sleeping_waits_are_woken);
    RUN(oversubscribed_pool_finishes_promptly);
    RUN(jobs_finish_beside_a_thread_that_hogs_a_core);
    RUN(pools_are_created_and_destroyed_repeatedly);
    RUN(bad_thread_counts_are_rejected);
    return harness_finish();
}
