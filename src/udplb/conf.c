/* conf.c - checking a cluster's contract and backend list as the core would, and copying it. */
#include "udplb/conf.h"

#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"

int udplb_conf_load(udplb_conf *conf, const char *const *backends, size_t n, size_t *bad)
{
	*bad = n;
	conf->backends = NULL;
	conf->n_backends = 0;
	int err = udplb_cluster_validate(&conf->cluster);
	if (err)
		return err;
	if (n > UDPLB_BACKENDS_MAX)
		return UDPLB_E_BACKENDS;
	conf->backends = calloc(n ? n : 1, sizeof *conf->backends);
	if (!conf->backends)
		return UDPLB_E_NOMEM;
	conf->n_backends = n;
	for (size_t i = 0; i < n; i++) {
		err = udplb_backend_parse(backends[i], &conf->backends[i]);
		if (err) {
			*bad = i;
			udplb_conf_free(conf);
			return err;
		}
	}
	/* The set as a whole: duplicates, and a Maglev size that fits it. */
	udplb_backends *view;
	err = udplb_backends_new(&view, conf->maglev_size);
	if (!err) {
		err = udplb_backends_set(view, conf->backends, conf->n_backends);
		udplb_backends_del(view);
	}
	if (err) {
		udplb_conf_free(conf);
		return err;
	}
	return 0;
}

int udplb_conf_copy(udplb_conf *dst, const udplb_conf *src)
{
	*dst = *src;
	dst->backends = calloc(src->n_backends ? src->n_backends : 1, sizeof *dst->backends);
	if (!dst->backends) {
		dst->n_backends = 0;
		return UDPLB_E_NOMEM;
	}
	if (src->n_backends)
		memcpy(dst->backends, src->backends, src->n_backends * sizeof *dst->backends);
	return 0;
}

long udplb_hex_decode(const char *text, uint8_t *out, size_t cap)
{
	long n = 0;
	for (const char *p = text; *p;) {
		if (*p == ' ' && p != text && p[1] != '\0' && p[1] != ' ') {
			p++; /* one space between two bytes */
			continue;
		}
		int hi = bytes_hex_digit(p[0]), lo = hi < 0 ? -1 : bytes_hex_digit(p[1]);
		if (lo < 0 || n >= UDPLB_DATAGRAM_MAX)
			return -1;
		if (out && (size_t)n < cap)
			out[n] = (uint8_t)(hi << 4 | lo);
		n++;
		p += 2;
	}
	return n;
}

void udplb_conf_free(udplb_conf *conf)
{
	free(conf->backends);
	conf->backends = NULL;
	conf->n_backends = 0;
}
