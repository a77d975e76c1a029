/* vec.h - growing a malloc'd array by doubling: the size arithmetic checked, the array left as it was when it cannot grow. */
#ifndef ETM_BASE_VEC_H
#define ETM_BASE_VEC_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The capacity, in elements, an array grows to first: enough that the
 * first few adds do not each call realloc, little enough that a short
 * array wastes no more than a cache line or two. */
#define VEC_MIN_CAP 16

/* Makes room in an array for `more` elements after its first len: arrp is
 * the address of the caller's pointer to it (a T ** for an array of T,
 * NULL while nothing is allocated), *capp its capacity in elements of elem
 * bytes. A capacity too small doubles, from VEC_MIN_CAP, until len + more
 * fit, so n adds cost O(n). Returns 0, or -1 when len + more or the byte
 * size would overflow or realloc fails; *arrp and *capp are then
 * unchanged. The pointer is read and written with memcpy, so a T * is
 * never accessed as a void * (C17 6.5p7). */
static inline __attribute__((warn_unused_result)) int
vec_reserve_size(void *arrp, size_t *capp, size_t len, size_t more, size_t elem)
{
	if (more > SIZE_MAX - len)
		return -1;
	size_t need = len + more, cap = *capp;
	if (need <= cap)
		return 0;
	if (cap < VEC_MIN_CAP)
		cap = VEC_MIN_CAP;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			return -1;
		cap *= 2;
	}
	if (cap > SIZE_MAX / elem)
		return -1;
	void *arr;
	memcpy(&arr, arrp, sizeof arr);
	void *grown = realloc(arr, cap * elem);
	if (!grown)
		return -1;
	memcpy(arrp, &grown, sizeof grown);
	*capp = cap;
	return 0;
}

/* vec_reserve_size with the element size taken from the array's type:
 * vec_reserve(&s->items, &s->cap, s->n, 1) before s->items[s->n++] = x. */
#define vec_reserve(arrp, capp, len, more) vec_reserve_size((arrp), (capp), (len), (more), sizeof **(arrp))

#endif
