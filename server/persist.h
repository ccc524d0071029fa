/*
 * persist.h - the prefix cache written to a folder at shutdown and read back at start (persist.c).
 */
#ifndef KILN_SERVER_PERSIST_H
#define KILN_SERVER_PERSIST_H

#include "engine.h"

/* Read DIR's prefix files into the cache, oldest first; a file that fails is reported and skipped.
 * Returns the files restored. */
int32_t ks_persist_restore(ks_engine *e, const char *dir);
/* Write every cached prompt to DIR (after ks_engine_shutdown, before ks_engine_destroy) and remove the
 * files of a larger earlier cache. Returns the files written. */
int32_t ks_persist_save(ks_engine *e, const char *dir);

#endif
