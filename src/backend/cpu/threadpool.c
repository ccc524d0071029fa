/*
 * threadpool.c - see threadpool.h.
 *
 * Every wait in the pool is a wait for one word to change: a worker waits for `generation` (a new job or
 * stop), the caller waits for `finished` (the job's last worker is done), and a thread at a barrier waits
 * for `phase` (the last thread arrived). Each such `word` holds the value and a count of the threads
 * asleep on it. A waiter spins for a few microseconds (a peer that is running arrives within that), then
 * counts itself in and sleeps on the word with a futex (Linux) or a condition variable (elsewhere). The
 * thread that changes the word wakes sleepers only when the count says there are any, so the quiet path
 * makes no system call. A wakeup is never lost: the waiter counts itself in before it reads the word the
 * last time and the changer writes the word before it reads the count (both seq_cst, so at least one
 * sees the other), and the futex sleeps only if the word still holds the value the waiter saw.
 *
 * On a busy machine a peer that waits for a core cannot arrive however long we spin, and spinning (or
 * sched_yield(), which does not give the core away for long) takes the core from the very thread we wait
 * for. So the spin adapts: each thread's budget halves whenever a wait ended asleep and doubles when the
 * peer came while it spun, between SPIN_MIN_NS and SPIN_MAX_NS.
 *
 * Sleeping is not enough when the machine has fewer free cores than the pool has threads: two threads the
 * scheduler has put on one core, or one whose peer waits for a core, pay a sleep and a wakeup at every
 * barrier, which for a small model's graph (about 70 barriers in 60 us of work) costs several times the
 * work; and a graph that small runs slower on two cores than on one even on a quiet machine (its
 * activations move between the cores at every node). So the caller picks each job's width (the threads
 * it runs on; fn gets it as nth) from measurements over windows of WINDOW_JOBS jobs:
 *  - trial: now and then a window runs at half or double the width (alternately, within 1..n_threads),
 *    and the pool keeps the trial width if its jobs took less time on average (leaving out each window's
 *    slowest job, which may have been preempted) than those of the window just before, by TRIAL_GAIN;
 *    a trial stops as soon as it cannot win, and the interval between trials doubles while they lose
 *    (and is at least TRIAL_SHARE times the lost trial's time, so trials cost a few percent at most);
 *  - retreat: when the jobs of a window so far (four or more) had their threads spend so much time waiting
 *    (past a short spin) that fewer than `width - 1` were working on average (threads x wall time -
 *    waits, over wall time), the width narrows to what was working at once, without waiting for a trial;
 *    the next trial of the wider width then comes after TRIAL_MIN_JOBS jobs, since a retreat may answer
 *    a passing disturbance.
 *
 * The barrier is sense-reversing: each thread reads `phase`, then counts itself into `arrived`; the last
 * to arrive resets the count and moves `phase` on, which releases the others.
 */
#include "backend/cpu/threadpool.h"

#include "core/core.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define SPIN_MIN_NS 500     /* the adaptive spin budget never goes below this ... */
#define SPIN_MAX_NS 20000   /* ... nor above this */
#define WINDOW_JOBS 8       /* jobs per measurement window */
#define TRIAL_MIN_JOBS 16   /* jobs between trials of another width ... */
#define TRIAL_MAX_JOBS 1024 /* ... growing to this while trials lose */
#define TRIAL_GAIN 0.95     /* a trial width is kept if its mean job time is below this x the previous */
#define TRIAL_SHARE 20      /* after a lost trial, at least this many times its time passes before the next */
#define WIDTH_BITS 11       /* `generation` holds a job counter above the job's width (<= 1024) */
#define CACHE_LINE 64

/* A word that threads wait on to change, with the count of those asleep on it. */
typedef struct word {
    atomic_int value;
    atomic_int sleepers;
#if !defined(__linux__)
    pthread_mutex_t lock;
    pthread_cond_t cond;
#endif
} word;

typedef struct worker {
    kiln_pool *pool;
    pthread_t thread;
    int ith;
} worker;

/* The words that different threads write sit on separate cache lines, so that spinning on one does not
 * bounce another. The padding is explicit because the pool comes from kiln__calloc (16-byte aligned). */
struct kiln_pool {
    int n_threads;
    worker *workers; /* [n_threads - 1]; the caller is thread 0 */
    int n_started;
    /* Written by the caller before it sets `generation`, read by the workers after they see it. */
    kiln_pool_fn fn;
    void *arg;
    int n_active; /* threads that run the current job (and the next, until it starts), 1..n_threads */
    /* The caller's own: the choice of width (see the file comment). */
    int window_jobs;        /* jobs measured in the current window */
    int64_t window_wall_ns; /* their wall time */
    int64_t window_max_ns;  /* the slowest job's */
    int64_t window_wait_ns; /* all threads' waits in them */
    double last_job_ns;     /* mean job time of the last window at the kept width; 0 before the first */
    int trial_from;         /* the kept width while a trial window runs at another, else 0 */
    int trial_in;           /* jobs until the next trial */
    int trial_every;        /* the current interval between trials */
    bool trial_wider;       /* the next trial doubles the width (else halves it) */
    atomic_bool stop;
    atomic_llong job_wait_ns; /* the workers' waits in the current job */
    char pad0[CACHE_LINE];
    word generation; /* job counter << WIDTH_BITS | the job's width; set once per job and at destroy */
    char pad1[CACHE_LINE];
    word regrow; /* bumped when the width grows, for the workers left out of the narrower jobs */
    char pad2[CACHE_LINE];
    atomic_int pending; /* workers still running the current job */
    char pad3[CACHE_LINE];
    word finished; /* bumped by the job's last worker */
    char pad4[CACHE_LINE];
    atomic_int arrived; /* threads at the current barrier */
    char pad5[CACHE_LINE];
    word phase; /* bumped by the last thread at each barrier */
    char pad6[CACHE_LINE];
};

/* The calling thread's spin budget, and the time it waited past the first clock reading of a spin. */
static _Thread_local int spin_budget_ns = SPIN_MAX_NS;
static _Thread_local int64_t waited_ns;

static void word_init(word *s) {
    atomic_init(&s->value, 0);
    atomic_init(&s->sleepers, 0);
#if !defined(__linux__)
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
#endif
}

static void word_fini(word *s) {
#if !defined(__linux__)
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
#else
    (void)s;
#endif
}

/* The platform part: sleep while s->value == old (returning early is allowed), and wake all sleepers. */
#if defined(__linux__)
static void word_sleep(word *s, int old) {
    /* The kernel compares the word with `old` under its own lock, so a change made before this call
     * returns at once (EAGAIN) and one made after it wakes us. Spurious returns are fine: we recheck. */
    syscall(SYS_futex, (int *)&s->value, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
}

static void word_wake(word *s) {
    syscall(SYS_futex, (int *)&s->value, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
#else
static void word_sleep(word *s, int old) {
    pthread_mutex_lock(&s->lock);
    if (atomic_load(&s->value) == old) pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

/* The changer stored the value before it takes the lock, so a waiter either saw the value under the lock
 * or is inside pthread_cond_wait when we broadcast. */
static void word_wake(word *s) {
    pthread_mutex_lock(&s->lock);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}
#endif

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
    return (int64_t)kiln__now_ns();
}

/* Spin until s->value != old or the budget runs out; true if the value changed. The clock is read only
 * every 64 rounds, so a wait that ends within a few hundred nanoseconds never reads it; *start is the
 * first reading, or 0 when there was none. */
static bool spin_while(word *s, int old, int budget_ns, int64_t *start) {
    *start = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(&s->value, memory_order_acquire) != old) return true;
        cpu_relax();
        if (i % 64 == 0) {
            int64_t t = now_ns();
            if (*start == 0) *start = t;
            else if (t - *start > budget_ns) return false;
        }
    }
}

/* Wait until s->value != old. What the changer wrote before it changed the value is visible after. A
 * thread that knows the wait will be long passes spin = false. */
static void word_wait(word *s, int old, bool spin) {
    int64_t start = 0;
    if (spin && spin_while(s, old, spin_budget_ns, &start)) {
        if (spin_budget_ns < SPIN_MAX_NS) spin_budget_ns *= 2;
        if (start) waited_ns += now_ns() - start;
        return;
    }
    if (!spin) start = now_ns();
    else if (spin_budget_ns > SPIN_MIN_NS) spin_budget_ns /= 2;
    atomic_fetch_add_explicit(&s->sleepers, 1, memory_order_seq_cst);
    while (atomic_load_explicit(&s->value, memory_order_seq_cst) == old) word_sleep(s, old);
    atomic_fetch_sub_explicit(&s->sleepers, 1, memory_order_relaxed);
    waited_ns += now_ns() - start;
}

/* Set s->value (only one thread at a time changes a word) and wake its sleepers, if any. */
static void word_set(word *s, int value) {
    atomic_store_explicit(&s->value, value, memory_order_seq_cst);
    if (atomic_load_explicit(&s->sleepers, memory_order_seq_cst) > 0) word_wake(s);
}

static int word_get(word *s) { return atomic_load_explicit(&s->value, memory_order_acquire); }

/* Publish a job of the given width to the workers (the caller sets fn, arg and pending first), and wake
 * the workers left out of the narrower jobs before if it is wider. */
static void start_job(kiln_pool *pool, int width) {
    unsigned count = ((unsigned)word_get(&pool->generation) >> WIDTH_BITS) + 1;
    int old_width = word_get(&pool->generation) & ((1 << WIDTH_BITS) - 1);
    word_set(&pool->generation, (int)((count & 0xFFFFFu) << WIDTH_BITS | (unsigned)width));
    if (width > old_width) word_set(&pool->regrow, word_get(&pool->regrow) + 1);
}

static void *worker_main(void *p) {
    worker *w = p;
    kiln_pool *pool = w->pool;
    int seen = 0;
    for (;;) {
        int regrow = word_get(&pool->regrow), width;
        word_wait(&pool->generation, seen, true);
        seen = word_get(&pool->generation);
        if (atomic_load_explicit(&pool->stop, memory_order_relaxed)) return NULL;
        width = seen & ((1 << WIDTH_BITS) - 1);
        if (w->ith >= width) {
            /* Left out: sleep until the width grows (read before the generation, so no bump is lost)
             * rather than spin and wake for every job. */
            word_wait(&pool->regrow, regrow, false);
            continue;
        }
        waited_ns = 0;
        pool->fn(pool->arg, w->ith, width);
        atomic_fetch_add_explicit(&pool->job_wait_ns, waited_ns, memory_order_relaxed);
        if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1)
            word_set(&pool->finished, word_get(&pool->finished) + 1);
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
    pool->n_active = n_threads;
    pool->trial_every = TRIAL_MIN_JOBS;
    atomic_init(&pool->stop, false);
    atomic_init(&pool->job_wait_ns, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->arrived, 0);
    word_init(&pool->generation);
    word_init(&pool->regrow);
    word_init(&pool->finished);
    word_init(&pool->phase);
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
    atomic_store_explicit(&pool->stop, true, memory_order_relaxed);
    start_job(pool, pool->n_threads); /* the seq_cst store publishes `stop` */
    for (int i = 0; i < pool->n_started; i++) pthread_join(pool->workers[i].thread, NULL);
    word_fini(&pool->phase);
    word_fini(&pool->finished);
    word_fini(&pool->regrow);
    word_fini(&pool->generation);
    kiln__dealloc(pool->workers);
    kiln__dealloc(pool);
}

int kiln__pool_size(const kiln_pool *pool) { return pool->n_threads; }

static void window_reset(kiln_pool *pool) {
    pool->window_jobs = 0;
    pool->window_wall_ns = 0;
    pool->window_max_ns = 0;
    pool->window_wait_ns = 0;
}

/* Start a trial window at half or double the width when one is due. */
static void trial_maybe(kiln_pool *pool) {
    int half = pool->n_active / 2, twice = pool->n_active * 2;
    int width;
    if (pool->trial_from || pool->last_job_ns == 0 || --pool->trial_in > 0) return;
    if (twice > pool->n_threads) twice = pool->n_threads;
    if (half < 1) half = 1;
    if (pool->trial_wider) width = twice > pool->n_active ? twice : half;
    else width = half < pool->n_active ? half : twice;
    pool->trial_wider = !pool->trial_wider;
    if (width == pool->n_active) return; /* a pool of one thread */
    pool->trial_from = pool->n_active;
    pool->n_active = width;
    window_reset(pool);
}

/* End a trial: keep its width if won, else go back and wait longer before the next one, at least long
 * enough that trials cost under 1/TRIAL_SHARE of the time. */
static void trial_end(kiln_pool *pool, bool won, double job_ns) {
    if (won) {
        pool->trial_every = TRIAL_MIN_JOBS;
        pool->trial_in = TRIAL_MIN_JOBS;
        pool->last_job_ns = job_ns;
    } else {
        double cost_in_jobs = TRIAL_SHARE * (double)pool->window_wall_ns / pool->last_job_ns;
        pool->n_active = pool->trial_from;
        if (pool->trial_every < TRIAL_MAX_JOBS) pool->trial_every *= 2;
        pool->trial_in = pool->trial_every;
        if (cost_in_jobs > pool->trial_in)
            pool->trial_in = cost_in_jobs < TRIAL_MAX_JOBS ? (int)cost_in_jobs : TRIAL_MAX_JOBS;
    }
    pool->trial_from = 0;
    window_reset(pool);
}

/* Count a job that ran in wall_ns on n_active threads, whose waits summed over the threads were wait_ns,
 * and decide the width of the next jobs (see the file comment). */
static void width_adapt(kiln_pool *pool, int64_t wall_ns, int64_t wait_ns) {
    double others_ns, working;
    pool->window_wall_ns += wall_ns;
    pool->window_wait_ns += wait_ns;
    if (wall_ns > pool->window_max_ns) pool->window_max_ns = wall_ns;
    pool->window_jobs++;
    others_ns = (double)(pool->window_wall_ns - pool->window_max_ns); /* all but the slowest job */
    if (pool->trial_from) {
        if (others_ns > (WINDOW_JOBS - 1) * pool->last_job_ns) trial_end(pool, false, 0); /* cannot win */
        else if (pool->window_jobs == WINDOW_JOBS)
            trial_end(pool, others_ns / (WINDOW_JOBS - 1) < TRIAL_GAIN * pool->last_job_ns,
                      others_ns / (WINDOW_JOBS - 1));
        return;
    }
    working = pool->n_active - (double)pool->window_wait_ns / (double)(pool->window_wall_ns + 1);
    if (pool->n_active > 1 && pool->window_jobs >= 4 && working < pool->n_active - 0.75) { /* retreat */
        pool->n_active = working < 1.0 ? 1 : (int)(working + 0.75);
        pool->last_job_ns = 0; /* measure the new width before any trial */
        /* Try the wider width again soon: a retreat may answer a passing disturbance, and with long jobs
         * (a 512-token encoder batch takes ~120 ms) the longest trial interval would keep one thread for
         * minutes. */
        pool->trial_every = TRIAL_MIN_JOBS;
        pool->trial_in = TRIAL_MIN_JOBS;
        window_reset(pool);
    } else if (pool->window_jobs == WINDOW_JOBS) {
        pool->last_job_ns = others_ns / (WINDOW_JOBS - 1);
        window_reset(pool);
    }
}

void kiln__pool_run(kiln_pool *pool, kiln_pool_fn fn, void *arg) {
    int finished;
    int64_t start;
    if (pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    start = now_ns();
    trial_maybe(pool);
    if (pool->n_active == 1) {
        fn(arg, 0, 1);
        width_adapt(pool, now_ns() - start, 0);
        return;
    }
    /* No worker reads these until it sees the new generation, and the last job's last worker bumped
     * `finished` before our previous call returned. */
    finished = atomic_load_explicit(&pool->finished.value, memory_order_relaxed);
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->pending, pool->n_active - 1, memory_order_relaxed);
    atomic_store_explicit(&pool->job_wait_ns, 0, memory_order_relaxed);
    waited_ns = 0;
    start_job(pool, pool->n_active);
    fn(arg, 0, pool->n_active);
    word_wait(&pool->finished, finished, true);
    width_adapt(pool, now_ns() - start,
                waited_ns + atomic_load_explicit(&pool->job_wait_ns, memory_order_relaxed));
}

void kiln__pool_barrier(kiln_pool *pool) {
    int phase;
    if (pool->n_active == 1) return;
    phase = atomic_load_explicit(&pool->phase.value, memory_order_acquire);
    if (atomic_fetch_add_explicit(&pool->arrived, 1, memory_order_acq_rel) == pool->n_active - 1) {
        atomic_store_explicit(&pool->arrived, 0, memory_order_relaxed);
        word_set(&pool->phase, phase + 1);
        return;
    }
    word_wait(&pool->phase, phase, true);
}
