/*
 * test_cli.c - the kiln command-line tool as a user meets it: `kiln run` prints exactly the golden texts
 * (stdout holds the prompt plus the generation, nothing else), -t 1 and -t 2 agree, every subcommand has
 * --help, bad usage exits 2 with a one-line message, a missing or broken model exits 1 naming the problem,
 * tokenize works on vocab-only files and inspect prints metadata as text and JSON; the KILN_* variables
 * still reach the library through the CLI (it reads none itself), a bad --devices list is refused by name,
 * kiln devices lists the devices and --device / $KILN_DEVICE pick one with the same greedy text,
 * perplexity scores chunks, and batched-bench prints one row per case.
 */
#include "harness.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

typedef struct run_result {
    char out[8192];
    char err[8192];
    int code;
} run_result;

/* Run the CLI with shell-quoted arguments, with the environment assignments env ("" for none) before it;
 * capture stdout, stderr and the exit code. */
static void kiln_env(run_result *r, const char *env, const char *args) {
    char cmd[4096], errpath[512];
    snprintf(errpath, sizeof errpath, "%s/cli_stderr.txt", KILN_TEST_TMP);
    snprintf(cmd, sizeof cmd, "%s '%s' %s", env, KILN_CLI_PATH, args);
    r->code = harness_run_command(cmd, errpath, r->out, sizeof r->out, r->err, sizeof r->err);
}

static void kiln(run_result *r, const char *args) { kiln_env(r, "", args); }

static void check_stdout_equals_file(const char *args, const char *golden) {
    static run_result r;
    size_t n;
    char *want = harness_read_file(harness_data_path(golden), &n);
    kiln(&r, args);
    CHECK_EQ_INT(r.code, 0);
    CHECK(want != NULL);
    if (want && strcmp(r.out, want) != 0)
        harness_fail(__FILE__, __LINE__, "kiln %s printed:\n%s\n--- expected (%s):\n%s", args, r.out, golden, want);
    free(want);
}

static void run_prints_the_bos_only_golden_byte_for_byte(void) {
    check_stdout_equals_file("run -m '" KILN_MODEL_PATH "' --temp 0 -n 200 -p '' -t 1",
                             "golden/stories260K_bos_only_200.txt");
    check_stdout_equals_file("run -m '" KILN_MODEL_PATH "' --temp 0 -n 200 -p '' -t 2",
                             "golden/stories260K_bos_only_200.txt");
}

static void run_prints_the_prompt_then_the_golden_continuation(void) {
    check_stdout_equals_file("run -m '" KILN_MODEL_PATH "' --temp 0 -n 60 -p 'Once upon a time' -t 1",
                             "golden/stories260K_once_upon_a_time_64.txt");
    check_stdout_equals_file("run -m '" KILN_MODEL_PATH "' --temp 0 -n 60 -p 'Once upon a time' -t 2",
                             "golden/stories260K_once_upon_a_time_64.txt");
}

static void run_reports_timings_on_stderr(void) {
    static run_result r;
    kiln(&r, "run -m '" KILN_MODEL_PATH "' -n 5 --seed 7 -p 'Once'");
    CHECK_EQ_INT(r.code, 0);
    CHECK(strncmp(r.out, "Once", 4) == 0);
    CHECK(strstr(r.err, "load") && strstr(r.err, "prompt 2 tokens") && strstr(r.err, "generation 5 tokens"));
}

static void seeded_sampling_is_reproducible(void) {
    static run_result a, b;
    kiln(&a, "run -m '" KILN_MODEL_PATH "' -n 40 --seed 1234 --temp 1.0 -p 'Once upon a time'");
    kiln(&b, "run -m '" KILN_MODEL_PATH "' -n 40 --seed 1234 --temp 1.0 -p 'Once upon a time' -t 1");
    CHECK_EQ_INT(a.code, 0);
    CHECK_STR(a.out, b.out);
}

static void generation_stops_when_the_context_is_full(void) {
    static run_result r;
    kiln(&r, "run -m '" KILN_MODEL_PATH "' --temp 0 -n 100 -c 10 -p 'Once upon a time'");
    CHECK_EQ_INT(r.code, 0);
    CHECK(strstr(r.err, "context full (10 tokens)") != NULL);
    CHECK(strstr(r.err, "generation 6 tokens") != NULL); /* 5 prompt ids + 5 decoded, the 6th sampled last */
}

static void every_command_has_help(void) {
    static const char *cmds[] = {"--help",           "run --help",        "chat --help",  "tokenize --help",
                                 "inspect --help",   "quantize --help",   "bench --help", "perplexity --help",
                                 "graph --help",     "synth --help",      "batched-bench --help",
                                 "devices --help"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        static run_result r;
        kiln(&r, cmds[i]);
        CHECK_EQ_INT(r.code, 0);
        CHECK(strstr(r.out, "usage: kiln") != NULL);
    }
}

static void bad_usage_exits_2_with_one_line_naming_the_problem(void) {
    static const struct {
        const char *args, *fragment;
    } cases[] = {
        {"frobnicate", "unknown command 'frobnicate'"},
        {"run --bogus", "unknown option '--bogus'"},
        {"run -n", "option -n needs a value"},
        {"run -n -3", "'-3' is not an integer"},
        {"run --temp hot", "'hot' is not a number"},
        {"run -t 0", "'0' is not an integer in 1..1024"},
        {"tokenize", "missing TEXT"},
        {"inspect", "missing FILE"},
        {"run --cpu warp9", "--cpu warp9"},
        {"batched-bench -npl 1,x", "'1,x' is not a list"},
        {"batched-bench -npl 65", "integers in 1..64"},
        {"run --device gpu", "'gpu' is not auto, cpu, vulkan or vulkan:N"},
        {"run --device vulkan --devices cpu", "--devices and --device are exclusive"},
        {"devices --bogus", "unknown argument '--bogus'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static run_result r;
        kiln(&r, cases[i].args);
        CHECK_EQ_INT(r.code, 2);
        if (!strstr(r.err, cases[i].fragment))
            harness_fail(__FILE__, __LINE__, "kiln %s: stderr '%s' lacks '%s'", cases[i].args, r.err, cases[i].fragment);
        CHECK(strchr(r.err, '\n') == r.err + strlen(r.err) - 1); /* exactly one line */
    }
}

static void a_missing_or_broken_model_exits_1_naming_it(void) {
    static run_result r;
    kiln(&r, "run -m /nonexistent/model.gguf");
    CHECK_EQ_INT(r.code, 1);
    CHECK(strstr(r.err, "/nonexistent/model.gguf") != NULL);
    kiln(&r, "run -m '" KILN_TEST_DATA "/golden/stories260K_bos_only_200.txt'");
    CHECK_EQ_INT(r.code, 1);
    CHECK(strstr(r.err, "magic") != NULL);
    kiln(&r, "run -m '" KILN_TEST_DATA "/vocab/ggml-vocab-llama-spm.gguf'");
    CHECK_EQ_INT(r.code, 1);
    CHECK(strstr(r.err, "required key 'llama.context_length' is missing") != NULL ||
          strstr(r.err, "is missing") != NULL);
}

static void tokenize_prints_ids_and_works_on_vocab_only_files(void) {
    static run_result r;
    kiln(&r, "tokenize -m '" KILN_MODEL_PATH "' --ids 'Once upon a time'");
    CHECK_EQ_INT(r.code, 0);
    CHECK_STR(r.out, "1 403 407 261 378\n");
    kiln(&r, "tokenize -m '" KILN_TEST_DATA "/vocab/ggml-vocab-llama-spm.gguf' --ids --no-bos ' Hello world'");
    CHECK_EQ_INT(r.code, 0);
    CHECK_STR(r.out, "29871 15043 3186\n");
    kiln(&r, "tokenize -m '" KILN_MODEL_PATH "' 'Once'");
    CHECK(strstr(r.out, "403 -> '\xe2\x96\x81Once'") != NULL);
}

static void inspect_prints_metadata_and_tensors_as_text_and_json(void) {
    static run_result r;
    kiln(&r, "inspect '" KILN_MODEL_PATH "'");
    CHECK_EQ_INT(r.code, 0);
    CHECK(strstr(r.out, "version: 3") != NULL);
    CHECK(strstr(r.out, "llama.embedding_length") != NULL);
    CHECK(strstr(r.out, "blk.4.ffn_up.weight") != NULL);
    CHECK(strstr(r.out, "tensors (48)") != NULL);
    kiln(&r, "inspect --json '" KILN_MODEL_PATH "' | head -c 400");
    CHECK_EQ_INT(r.code, 0);
    CHECK(strncmp(r.out, "{\"version\": 3, \"alignment\": 32", 30) == 0);
}

static void kiln_passes_from_the_environment_reaches_the_library(void) {
    static run_result plain, none, bad;
    kiln(&plain, "run -m '" KILN_MODEL_PATH "' --temp 0 -n 4 -p 'Once upon a time'");
    kiln_env(&none, "KILN_PASSES=none", "run -m '" KILN_MODEL_PATH "' --temp 0 -n 4 -p 'Once upon a time'");
    CHECK_EQ_INT(plain.code, 0);
    CHECK_EQ_INT(none.code, 0);
    CHECK_STR(none.out, plain.out);
    /* A list the pass parser rejects shows that the variable was passed on, not ignored. */
    kiln_env(&bad, "KILN_PASSES=no_such_pass", "run -m '" KILN_MODEL_PATH "' --temp 0 -n 4");
    CHECK_EQ_INT(bad.code, 1);
    CHECK(strstr(bad.err, "no_such_pass") != NULL);
    /* --passes wins over the variable. */
    kiln_env(&bad, "KILN_PASSES=no_such_pass",
             "run -m '" KILN_MODEL_PATH "' --temp 0 -n 4 -p 'Once upon a time' --passes all");
    CHECK_EQ_INT(bad.code, 0);
    CHECK_STR(bad.out, plain.out);
}

static void kiln_cpu_from_the_environment_is_checked(void) {
    static run_result r;
    kiln_env(&r, "KILN_CPU=warp9", "run -m '" KILN_MODEL_PATH "' --temp 0 -n 4");
    CHECK_EQ_INT(r.code, 2);
    CHECK(strstr(r.err, "KILN_CPU warp9") != NULL);
    kiln_env(&r, "KILN_CPU=ref", "run -m '" KILN_MODEL_PATH "' --temp 0 -n 4 -p 'Once'");
    CHECK_EQ_INT(r.code, 0);
    CHECK(strncmp(r.out, "Once", 4) == 0);
}

static void a_bad_devices_list_exits_1_naming_the_device(void) {
    static run_result r;
    kiln(&r, "run -m '" KILN_MODEL_PATH "' --devices warp9 -n 4");
    CHECK_EQ_INT(r.code, 1);
    if (!strstr(r.err, "warp9")) harness_fail(__FILE__, __LINE__, "stderr '%s' does not name 'warp9'", r.err);
    kiln(&r, "batched-bench -m '" KILN_MODEL_PATH "' --devices cpu,warp9 -npp 8 -ntg 4 -npl 1");
    CHECK_EQ_INT(r.code, 1);
    CHECK(strstr(r.err, "warp9") != NULL);
    CHECK(strstr(r.out, "|") == NULL); /* no table */
}

/* kiln devices lists the CPU and the Vulkan devices (or why there are none); --device and $KILN_DEVICE
 * choose one, and whatever runs where, greedy output is the golden text. auto never takes lavapipe, and a
 * device that cannot start leaves a one-line note on stderr. */
static void devices_lists_the_cpu_and_device_picks_one_with_the_same_output(void) {
    static run_result r, cpu;
    kiln(&r, "devices");
    CHECK_EQ_INT(r.code, 0);
    CHECK(strncmp(r.out, "cpu ", 4) == 0);
    CHECK(strstr(r.out, "\nvulkan:0 ") != NULL || strstr(r.out, "\nvulkan    none: ") != NULL);
    CHECK(strstr(r.out, "\nvulkan    none: ") != NULL || strstr(r.out, ": subgroup reductions\n") != NULL ||
          strstr(r.out, ": shared-memory reductions\n") != NULL); /* which reduction variant it runs */
    kiln(&cpu, "run -m '" KILN_MODEL_PATH "' --temp 0 -n 24 -p 'Once upon a time'");
    CHECK_EQ_INT(cpu.code, 0);
    static const char *runs[][2] = {{"", "--device vulkan"}, {"KILN_DEVICE=vulkan", ""}, {"", "--device auto"},
                                    {"", "--device vulkan:9"}, {"KILN_DEVICE=cpu", ""}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char args[1024];
        snprintf(args, sizeof args, "run -m '%s' --temp 0 -n 24 -p 'Once upon a time' %s", KILN_MODEL_PATH, runs[i][1]);
        kiln_env(&r, runs[i][0], args);
        CHECK_EQ_INT(r.code, 0);
        if (strcmp(r.out, cpu.out))
            harness_fail(__FILE__, __LINE__, "%s kiln %s printed '%s', the CPU '%s'", runs[i][0], args, r.out, cpu.out);
        if (i == 3 && !strstr(r.err, "kiln run: note: vulkan:9: "))
            harness_fail(__FILE__, __LINE__, "--device vulkan:9: stderr '%s' has no note", r.err);
    }
    /* serve says the same when it loads: started in the background, sent SIGINT once it listens (or after
     * 60 s), it shuts down cleanly. Spawned and reaped here rather than by a shell, whose `wait` status
     * (dash's) is not the process's own. */
    char errpath[512];
    size_t n;
    snprintf(errpath, sizeof errpath, "%s/cli_serve_stderr.txt", KILN_TEST_TMP);
    char *argv[] = {(char *)KILN_CLI_PATH, "serve", "-m", (char *)KILN_MODEL_PATH, "--port", "0",
                    "--device", "vulkan:9", NULL};
    posix_spawn_file_actions_t fa;
    pid_t pid = -1;
    int status = -1;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(posix_spawn(&pid, KILN_CLI_PATH, &fa, NULL, argv, environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; pid > 0 && i < 600; i++) {
        char *so_far = harness_read_file(errpath, &n);
        bool up = so_far && strstr(so_far, "listening on");
        free(so_far);
        if (up) break;
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    if (pid > 0) {
        kill(pid, SIGINT);
        CHECK(waitpid(pid, &status, 0) == pid);
    }
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        harness_fail(__FILE__, __LINE__, "serve after SIGINT: status 0x%x (exit %d, signal %d)", status,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    char *err = harness_read_file(errpath, &n);
    if (!err || !strstr(err, "kiln serve: note: vulkan:9: ") || !strstr(err, "listening on"))
        harness_fail(__FILE__, __LINE__, "serve --device vulkan:9: stderr '%s' has no note or never listened",
                     err ? err : "");
    free(err);
}

/* Write a text of some hundred tokens for perplexity. */
static const char *story_file(void) {
    static char path[512];
    FILE *f;
    snprintf(path, sizeof path, "%s/cli_story.txt", KILN_TEST_TMP);
    f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return path;
    for (int i = 0; i < 8; i++)
        fputs("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
              "One day, she saw a big dog. The dog was very happy and wanted to play with Lily.\n",
              f);
    fclose(f);
    return path;
}

static void perplexity_scores_chunks_and_a_model_agrees_with_itself(void) {
    static run_result r;
    char args[1024];
    double ppl = 0;
    const char *text = story_file();
    snprintf(args, sizeof args, "perplexity -m '%s' -f '%s' -c 64 --chunks 3", KILN_MODEL_PATH, text);
    kiln(&r, args);
    CHECK_EQ_INT(r.code, 0);
    const char *at = strstr(r.out, "perplexity: ");
    CHECK(at != NULL && sscanf(at, "perplexity: %lf", &ppl) == 1);
    CHECK(ppl > 1.0 && ppl < 512.0); /* between certainty and a uniform guess over the 512 tokens */
    CHECK(strstr(r.out, "over 93 tokens (3 chunks of 64") != NULL); /* 31 scored positions per chunk */
    snprintf(args, sizeof args, "perplexity -m '%s' -f '%s' -c 64 --chunks 2 --kl-base '%s'", KILN_MODEL_PATH,
             text, KILN_MODEL_PATH);
    kiln(&r, args);
    CHECK_EQ_INT(r.code, 0);
    CHECK(strstr(r.out, "KL divergence: mean 0.000000") != NULL);
    CHECK(strstr(r.out, "top-1 agreement: 100.00%") != NULL);
}

static void batched_bench_prints_one_row_per_case(void) {
    static run_result r;
    kiln(&r, "batched-bench -m '" KILN_MODEL_PATH "' -npp 8 -ntg 4 -npl 1,2 -t 1");
    CHECK_EQ_INT(r.code, 0);
    CHECK(strstr(r.out, "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |"
                        "      T s |    S t/s |") != NULL);
    CHECK(strstr(r.out, "|     8 |      4 |    1 |     12 |") != NULL);
    CHECK(strstr(r.out, "|     8 |      4 |    2 |     24 |") != NULL);
    kiln(&r, "batched-bench -m '" KILN_MODEL_PATH "' -npp 8 -ntg 4 -npl 1,2 --json");
    CHECK_EQ_INT(r.code, 0);
    CHECK(strstr(r.out, "\"pp\": 8, \"tg\": 4, \"pl\": 2, \"n_kv\": 24") != NULL);
    /* A case larger than -c is skipped, with a note. */
    kiln(&r, "batched-bench -m '" KILN_MODEL_PATH "' -npp 8 -ntg 4 -npl 1,4 -c 30");
    CHECK_EQ_INT(r.code, 0);
    CHECK(strstr(r.out, "|     8 |      4 |    1 |     12 |") != NULL);
    CHECK(strstr(r.out, "|    4 |     48 |") == NULL);
    CHECK(strstr(r.err, "skipping PP 8, TG 4, B 4") != NULL);
}

int main(void) {
    RUN(run_prints_the_bos_only_golden_byte_for_byte);
    RUN(run_prints_the_prompt_then_the_golden_continuation);
    RUN(run_reports_timings_on_stderr);
    RUN(seeded_sampling_is_reproducible);
    RUN(generation_stops_when_the_context_is_full);
    RUN(every_command_has_help);
    RUN(bad_usage_exits_2_with_one_line_naming_the_problem);
    RUN(a_missing_or_broken_model_exits_1_naming_it);
    RUN(tokenize_prints_ids_and_works_on_vocab_only_files);
    RUN(inspect_prints_metadata_and_tensors_as_text_and_json);
    RUN(kiln_passes_from_the_environment_reaches_the_library);
    RUN(kiln_cpu_from_the_environment_is_checked);
    RUN(a_bad_devices_list_exits_1_naming_the_device);
    RUN(devices_lists_the_cpu_and_device_picks_one_with_the_same_output);
    RUN(perplexity_scores_chunks_and_a_model_agrees_with_itself);
    RUN(batched_bench_prints_one_row_per_case);
    return harness_finish();
}
