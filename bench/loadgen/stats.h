/* stats.h - the load tool's clocks and latency samples with their percentiles. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "loadgen.h"

uint64_t lg_now_ns(void);      /* CLOCK_MONOTONIC */
double lg_cpu_s(void);         /* this process's user + system CPU seconds */

/* Every latency kept (a 5 s run holds at most a few hundred thousand), so
 * percentiles are exact, not bucketed. A zeroed struct is empty. */
struct lg_samples {
	uint64_t *ns;
	size_t n, cap;
};

/* 0, or -1 when out of memory (the sample is dropped). */
int lg_samples_add(struct lg_samples *s, uint64_t ns) LG_WARN;
/* Sorts the samples; p in [0, 100]; microseconds; 0 when there are none. */
double lg_samples_pct_us(struct lg_samples *s, double p);
void lg_samples_free(struct lg_samples *s);
