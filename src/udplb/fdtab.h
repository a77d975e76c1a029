/* fdtab.h - a zero-filled table indexed by file descriptor that grows by doubling: the shell's owner table and the reuse pool's index both use it. */
#ifndef ETM_UDPLB_FDTAB_H
#define ETM_UDPLB_FDTAB_H

#include <string.h>

#include "base/vec.h"

/* Returns tab (n entries of elem bytes) grown, if need be, to hold index
 * fd, the new entries zeroed, and sets *n to its length; NULL without
 * memory (or for a negative fd), tab and *n then unchanged. */
static inline void *udplb_fdtab_fit(void *tab, size_t *n, size_t elem, int fd)
{
	size_t was = *n;
	if (fd < 0 || vec_reserve_size(&tab, n, (size_t)fd, 1, elem) < 0)
		return NULL;
	if (*n > was)
		memset((unsigned char *)tab + was * elem, 0, (*n - was) * elem);
	return tab;
}

#endif
