/* Odradek bench shim: the few definitions rdkafka_performance.c takes from
 * librdkafka's private headers (rd.h / rdtime.h), written against libc only. */
#ifndef ODRADEK_BENCH_RD_SHIM_H
#define ODRADEK_BENCH_RD_SHIM_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/time.h>

typedef int64_t rd_ts_t; /* microseconds */

static __inline rd_ts_t rd_clock(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ((rd_ts_t)ts.tv_sec * 1000000LL) + ((rd_ts_t)ts.tv_nsec / 1000);
}

#define rd_snprintf(...) snprintf(__VA_ARGS__)
#define RD_MAX(a, b) ((a) > (b) ? (a) : (b))
#define RD_MIN(a, b) ((a) < (b) ? (a) : (b))
#endif
