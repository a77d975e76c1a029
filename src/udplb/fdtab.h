/* fdtab.h - a zero-filled table indexed by file descriptor that grows by doubling: the shell's owner table and the reuse pool's index both use it. */
#ifndef ETM_UDPLB_FDTAB_H
#define ETM_UDPLB_FDTAB_H

#include <stdlib.h>
#include <string.h>

/* Returns tab (n entries of elem bytes) grown, if need be, to hold index
 * fd, the new entries zeroed, and sets *n to its length; NULL without
 * memory, tab and *n then unchanged. */
static inline void *udplb_fdtab_fit(void *tab, size_t *n, size_t elem, int fd)
{
	if ((size_t)fd < *n)
		return tab;
	size_t len = *n ? *n : 256;
	while (len <= (size_t)fd)
		len *= 2;
	unsigned char *t = realloc(tab, len * elem);
	if (!t)
		return NULL;
	memset(t + *n * elem, 0, (len - *n) * elem);
	*n = len;
	return t;
}

#endif
