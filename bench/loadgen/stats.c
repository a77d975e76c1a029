/* stats.c - clocks and exact percentiles over kept samples. */
#include "stats.h"

#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

uint64_t lg_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double lg_cpu_s(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int lg_samples_add(struct lg_samples *s, uint64_t ns)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 4096;
		uint64_t *p = realloc(s->ns, cap * sizeof *p);
		if (!p)
			return -1;
		s->ns = p;
		s->cap = cap;
	}
	s->ns[s->n++] = ns;
	return 0;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

double lg_samples_pct_us(struct lg_samples *s, double p)
{
	if (s->n == 0)
		return 0;
	qsort(s->ns, s->n, sizeof *s->ns, cmp);
	/* nearest rank */
	size_t i = (size_t)(p / 100.0 * (double)s->n);
	if (i >= s->n)
		i = s->n - 1;
	return (double)s->ns[i] / 1000.0;
}

void lg_samples_free(struct lg_samples *s)
{
	free(s->ns);
	*s = (struct lg_samples){0};
}
