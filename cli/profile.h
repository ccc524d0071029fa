/*
 * profile.h - the device kernel profile as a table (`kiln bench --profile`).
 */
#ifndef KILN_CLI_PROFILE_H
#define KILN_CLI_PROFILE_H

#include "kiln.h"

#include <stdio.h>

/* The profile of `runs` runs of test `test` that took wall_s seconds in all: per run, the wall time beside
 * the host's recording and submission times and the kernels' device time, then one row per kernel. */
void cli_print_profile(FILE *f, const char *test, const kiln_device_profile *p, double wall_s, long runs);

#endif
