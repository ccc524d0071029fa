/*
 * bandwidth.h - the read-bandwidth probe of `kiln bench`: how fast this machine's threads can stream a
 * buffer far larger than the caches, the ceiling that decode's "share of bandwidth" is measured against.
 */
#ifndef KILN_CLI_BANDWIDTH_H
#define KILN_CLI_BANDWIDTH_H

#include <stddef.h>
#include <stdio.h>

/* The best read bandwidth in GB/s found over several access patterns with up to n_threads threads (see
 * bandwidth.c for the search), and in how a short description of the pattern that reached it
 * ("2 threads x 8 streams, 2 MiB pages, prefetch 2048 B ahead, regular loads"). When log is not NULL,
 * every pattern tried is printed to it with its GB/s. Returns 0 (how: "") when the buffer could not be
 * allocated or n_threads is out of 1..64. */
double cli_read_bandwidth(int n_threads, char *how, size_t how_len, FILE *log);

#endif
