/*
 * cmd_serve.c - `kiln serve`: an OpenAI-compatible HTTP server over one model (server/, docs/server.md).
 * This file maps options (llama-server's names where it has one) to ks_server_params and runs the server
 * until SIGTERM or SIGINT. The API key may come from --api-key, --api-key-file (better: it stays out of
 * the process list) or $KILN_API_KEY; KILN_CPU selects the kernels as for every command.
 */
#include "common.h"
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char serve_help[] =
    "usage: kiln serve [-m FILE] [options]\n"
    "\n"
    "Serve the model over HTTP with OpenAI's API: POST /v1/chat/completions, POST /v1/completions\n"
    "(streaming or not), GET /v1/models, GET /health, GET /metrics (Prometheus), POST /tokenize,\n"
    "POST /detokenize, and a chat page at GET /. An encoder model (BERT) serves POST /v1/embeddings\n"
    "instead of chat and completions. See docs/server.md.\n"
    "\n"
    "  -m, --model FILE        GGUF model (default: the bundled model)\n"
    "      --host HOST         address to listen on (default 127.0.0.1; 0.0.0.0 exposes the server)\n"
    "      --port N            port (default 8080; 0 picks a free one, printed when ready)\n"
    "  -np, --parallel N       sequences decoded at once (default 8)\n"
    "  -c, --ctx-size N        KV cells shared by all requests (default 4096, at most the model's)\n"
    "  -b, --batch-size N      tokens per engine step, decode plus prompt slices (default 64)\n"
    "      --max-queue N       requests waiting beyond the running ones before 429 (default 64)\n"
    "  -n, --max-tokens N      the most tokens one request may generate, and the default for chat\n"
    "                          requests that do not say (default: the context size)\n"
    "      --api-key KEY       require 'Authorization: Bearer KEY' (also $KILN_API_KEY)\n"
    "      --api-key-file F    read the key from the file F (its first line)\n"
    "      --timeout S         seconds a connection may stay idle or take to send a request (default 30)\n"
    "      --max-body BYTES    the largest request body (default 1048576)\n"
    "      --grace S           seconds running requests get to finish after SIGTERM (default 10)\n"
    "      --lookup            speculative decoding by prompt lookup for every request: each step a\n"
    "                          choice may guess its next tokens from its prompt and output; greedy\n"
    "                          output is unchanged, sampled output keeps its distribution\n"
    "  -md, --model-draft F    speculative decoding with draft model F (same vocabulary; a quantized copy\n"
    "                          of the model will do): it guesses each choice's next tokens greedily, in\n"
    "                          its own context; greedy output is unchanged, sampled output keeps its\n"
    "                          distribution\n"
    "      --draft-max N       most guessed tokens per choice and step (default 8; with --lookup or\n"
    "                          --model-draft)\n"
    "      --slot-save-path DIR  folder of POST /slots/{id}?action=save|restore state files (KV cache and\n"
    "                          tokens of a cached prompt; slot 0 is the most recent); without it: 501\n"
    "      --prefix-cache-dir DIR  keep the prefix cache across restarts: its prompts are written to DIR\n"
    "                          at shutdown and read back at start (files of another model are skipped)\n"
    "  -t, --threads N         CPU threads (default: all cores)\n"
    "      --devices LIST      backends in priority order, comma-separated (default: cpu)\n"
    "      --device D          where to run: auto (a discrete or integrated GPU through Vulkan, else the\n"
    "                          CPU), cpu, or vulkan[:N] (Vulkan device N of `kiln devices`, lavapipe\n"
    "                          included); default $KILN_DEVICE, else cpu. The CPU runs whatever the\n"
    "                          device cannot\n"
    "      --gpu-layers N      with --device: the device runs the last N layers and the output head,\n"
    "                          the CPU the rest (0: none; all, the default; auto: as many as fit)\n"
    "      --cpu LEVEL         CPU kernel level (default: $KILN_CPU, else the best this CPU has)\n"
    "      --verbose           log the engine's steps to stderr\n"
    "  -h, --help              this text\n";

/* The first line of file f, without its line end; NULL (after printing) when unreadable or empty. */
static char *read_key_file(const char *f) {
    FILE *fp = fopen(f, "r");
    if (!fp) {
        fprintf(stderr, "kiln serve: cannot open the API key file '%s'\n", f);
        return NULL;
    }
    char buf[1024];
    char *line = fgets(buf, sizeof buf, fp);
    fclose(fp);
    size_t n = line ? strcspn(buf, "\r\n") : 0;
    if (n == 0) {
        fprintf(stderr, "kiln serve: the API key file '%s' is empty\n", f);
        return NULL;
    }
    buf[n] = '\0';
    return strdup(buf);
}

typedef struct serve_options {
    ks_server_params p;
    cli_engine engine;
    const char *key_file;
    bool lookup;    /* --lookup */
    long draft_max; /* --draft-max */
} serve_options;

/* One option at argv[*i]; false (after printing) when it is unknown or its value is malformed. */
static bool parse_option(serve_options *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    ks_server_params *p = &o->p;
    long v;
    bool ok = true;
    if (cli_arg_engine("serve", argc, argv, i, &o->engine, &ok)) return ok;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) return cli_arg_str("serve", argc, argv, i, &p->model_path);
    if (!strcmp(a, "--host")) return cli_arg_str("serve", argc, argv, i, &p->host);
    if (!strcmp(a, "--api-key")) return cli_arg_str("serve", argc, argv, i, &p->api_key);
    if (!strcmp(a, "--api-key-file")) return cli_arg_str("serve", argc, argv, i, &o->key_file);
    if (!strcmp(a, "--verbose")) return (p->verbose = true);
    if (!strcmp(a, "--lookup")) return (o->lookup = true);
    if (!strcmp(a, "-md") || !strcmp(a, "--model-draft"))
        return cli_arg_str("serve", argc, argv, i, &p->draft_model_path);
    if (!strcmp(a, "--draft-max")) return cli_arg_int("serve", argc, argv, i, 1, 64, &o->draft_max);
    if (!strcmp(a, "--slot-save-path")) return cli_arg_str("serve", argc, argv, i, &p->slot_save_path);
    if (!strcmp(a, "--prefix-cache-dir")) return cli_arg_str("serve", argc, argv, i, &p->prefix_cache_dir);
    if (!strcmp(a, "--port"))
        ok = cli_arg_int("serve", argc, argv, i, 0, 65535, &v) && ((p->port = (int)v), 1);
    else if (!strcmp(a, "-np") || !strcmp(a, "--parallel"))
        ok = cli_arg_int("serve", argc, argv, i, 1, KILN_SEQ_MAX, &v) &&
             ((p->engine.n_parallel = (int32_t)v), 1);
    else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
        ok = cli_arg_int("serve", argc, argv, i, 16, 1 << 22, &v) && ((p->engine.n_ctx = (int32_t)v), 1);
    else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size"))
        ok = cli_arg_int("serve", argc, argv, i, 1, 1 << 16, &v) && ((p->engine.n_batch = (int32_t)v), 1);
    else if (!strcmp(a, "--max-queue"))
        ok = cli_arg_int("serve", argc, argv, i, 1, 1 << 20, &v) && ((p->engine.max_queue = (int32_t)v), 1);
    else if (!strcmp(a, "-n") || !strcmp(a, "--max-tokens"))
        ok = cli_arg_int("serve", argc, argv, i, 1, 1 << 22, &v) &&
             ((p->engine.max_tokens_cap = (int32_t)v), 1);
    else if (!strcmp(a, "--timeout"))
        ok = cli_arg_int("serve", argc, argv, i, 1, 86400, &v) && ((p->timeout_s = (int32_t)v), 1);
    else if (!strcmp(a, "--max-body"))
        ok = cli_arg_int("serve", argc, argv, i, 1024, 1L << 30, &v) && ((p->max_body = (size_t)v), 1);
    else if (!strcmp(a, "--grace"))
        ok = cli_arg_int("serve", argc, argv, i, 0, 3600, &v) && ((p->grace_ms = (int32_t)v * 1000), 1);
    else {
        cli_usage_error("serve", "unknown option '%s'", a);
        return false;
    }
    return ok;
}

int cmd_serve(int argc, char **argv) {
    serve_options o = {.p = ks_server_params_default(), .draft_max = 8};
    char *key = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(serve_help, stdout);
            return CLI_OK;
        }
        if (!parse_option(&o, argc, argv, &i)) return CLI_USAGE;
    }
    if (o.p.api_key && o.key_file)
        return cli_usage_error("serve", "give --api-key or --api-key-file, not both");
    if (o.lookup && o.p.draft_model_path)
        return cli_usage_error("serve", "give --lookup or --model-draft, not both");
    o.p.engine.draft_max = o.lookup || o.p.draft_model_path ? (int32_t)o.draft_max : 0;
    if (o.key_file) {
        if (!(key = read_key_file(o.key_file))) return CLI_USAGE;
        o.p.api_key = key;
    } else if (!o.p.api_key && getenv("KILN_API_KEY") && *getenv("KILN_API_KEY")) {
        o.p.api_key = getenv("KILN_API_KEY");
    }
    if (o.p.api_key && !*o.p.api_key) return cli_usage_error("serve", "the API key is empty");
    struct stat st;
    if (o.p.slot_save_path && (stat(o.p.slot_save_path, &st) != 0 || !S_ISDIR(st.st_mode)))
        return cli_usage_error("serve", "--slot-save-path '%s' is not a folder", o.p.slot_save_path);
    if (o.p.prefix_cache_dir && (stat(o.p.prefix_cache_dir, &st) != 0 || !S_ISDIR(st.st_mode)))
        return cli_usage_error("serve", "--prefix-cache-dir '%s' is not a folder", o.p.prefix_cache_dir);
    const char *level = o.engine.cpu ? o.engine.cpu : getenv("KILN_CPU");
    kiln_status s;
    if (level && *level && (s = kiln_set_cpu_level(level))) {
        free(key);
        return cli_usage_error("serve", "CPU level %s: %s", level, kiln_last_error());
    }
    if (!o.p.model_path) o.p.model_path = cli_default_model();
    o.p.n_threads = (int32_t)o.engine.n_threads;
    o.p.devices = cli_engine_devices(&o.engine);
    int rc = ks_server_run(&o.p);
    free(key);
    return rc == 0 ? CLI_OK : CLI_FAIL;
}
