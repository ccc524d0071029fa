/*
 * persist.c - the prefix cache across restarts (`kiln serve --prefix-cache-dir DIR`): at shutdown, once
 * the running requests are done, every cached prompt is written to DIR as a KV state file (the slot
 * action's format, kiln_ctx_state_save), and at start the files are read back into the cache before the
 * server says it is ready, so the prompts computed before a restart are reused after it.
 *
 * Files: DIR/prefix-000.kvs is the least recently used entry, then up in order of use; restoring them in
 * that order leaves the cache in the order it had; reading stops at the first missing number. At save,
 * every other prefix-NNN.kvs in DIR (a larger earlier cache's) is removed.
 * A file that does not restore (another model, a corrupt or truncated file: the state reader's named
 * errors) is reported on stderr and skipped; it never stops the server.
 */
#include "persist.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILES 1024 /* more than any cache: cache_seqs <= KILN_SEQ_MAX */

static void file_name(char *out, size_t cap, const char *dir, int32_t i) {
    snprintf(out, cap, "%s/prefix-%03d.kvs", dir, (int)i);
}

/* Remove DIR/prefix-NNN.kvs for every NNN >= from. */
static void remove_stale(const char *dir, int32_t from) {
    char path[4096];
    DIR *d = opendir(dir);
    struct dirent *ent;
    if (!d) return;
    while ((ent = readdir(d))) {
        int number = -1, end = 0;
        if (sscanf(ent->d_name, "prefix-%3d.kvs%n", &number, &end) == 1 && end > 0 && !ent->d_name[end] &&
            number >= from && strlen(ent->d_name) == 14) {
            snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

int32_t ks_persist_restore(ks_engine *e, const char *dir) {
    int32_t restored = 0, tokens = 0;
    char path[4096];
    struct stat st;
    for (int32_t i = 0; i < MAX_FILES; i++) {
        ks_slot_result r = {0};
        file_name(path, sizeof path, dir, i);
        if (stat(path, &st) != 0) break;
        if (ks_engine_slot(e, KS_SLOT_RESTORE, 0, path, &r) != KILN_OK) {
            fprintf(stderr, "kiln serve: %s not restored: %s\n", path,
                    r.error[0] ? r.error : kiln_last_error());
            continue;
        }
        restored++;
        tokens += r.n_tokens;
    }
    if (restored)
        fprintf(stderr, "kiln serve: restored %d cached prompts (%d tokens) from %s\n", restored, tokens,
                dir);
    return restored;
}

int32_t ks_persist_save(ks_engine *e, const char *dir) {
    ks_metrics m;
    int32_t saved = 0, n;
    char path[4096];
    ks_engine_metrics(e, &m);
    n = m.prefix_cache_sequences;
    /* Saving a slot makes it the most recent: saving the oldest n times writes each entry once, oldest
     * first. */
    for (int32_t i = 0; i < n; i++) {
        ks_slot_result r = {0};
        file_name(path, sizeof path, dir, saved);
        if (ks_engine_slot(e, KS_SLOT_SAVE, n - 1, path, &r) != KILN_OK) {
            fprintf(stderr, "kiln serve: saving a cached prompt to %s: %s\n", path,
                    r.error[0] ? r.error : kiln_last_error());
            unlink(path);
            continue;
        }
        saved++;
    }
    remove_stale(dir, saved);
    fprintf(stderr, "kiln serve: saved %d cached prompts to %s\n", saved, dir);
    return saved;
}
