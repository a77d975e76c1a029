/* geodata.c - geosite.dat / geoip.dat: the file loader, a protobuf wire walk that finds the wanted codes, protobuf-c for those entries. */
#include "route/geodata.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytes.h"
#include "route/geodata.pb-c.h"
#include "route/route_msg.h"

/* ---- the file ---- */

static int os_fail(char *err, size_t err_size, int e)
{
	char buf[256];
	const char *text = strerror_r(e, buf, sizeof buf); /* the GNU variant */
	return route_fail(err, err_size, ROUTE_ERR_OS, text, e);
}

int geodata_read_file(const char *path, const char *kind, uint8_t **data, size_t *len,
                      char *err, size_t err_size)
{
	*data = NULL;
	*len = 0;
	int rc = 0;
	uint8_t *buf = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return os_fail(err, err_size, errno);

	/* The size is a hint (a pipe has none, a file may grow): read to EOF,
	 * refusing the byte past the limit. */
	struct stat st;
	size_t cap = 64 << 10, n = 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
		if ((uint64_t)st.st_size > GEODATA_FILE_MAX) {
			rc = route_fail(err, err_size, ROUTE_ERR_FILE_TOO_LARGE, kind,
			                GEODATA_FILE_MAX_MIB);
			goto out;
		}
		cap = (size_t)st.st_size + 1;
	}
	buf = malloc(cap);
	if (!buf) {
		rc = route_fail(err, err_size, ROUTE_ERR_NOMEM);
		goto out;
	}
	for (;;) {
		if (n == cap) {
			if (cap > GEODATA_FILE_MAX) {
				rc = route_fail(err, err_size, ROUTE_ERR_FILE_TOO_LARGE, kind,
				                GEODATA_FILE_MAX_MIB);
				goto out;
			}
			size_t nc = cap * 2 > GEODATA_FILE_MAX + 1 ? GEODATA_FILE_MAX + 1 : cap * 2;
			uint8_t *p = realloc(buf, nc);
			if (!p) {
				rc = route_fail(err, err_size, ROUTE_ERR_NOMEM);
				goto out;
			}
			buf = p;
			cap = nc;
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = os_fail(err, err_size, errno);
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n > GEODATA_FILE_MAX) {
		rc = route_fail(err, err_size, ROUTE_ERR_FILE_TOO_LARGE, kind, GEODATA_FILE_MAX_MIB);
		goto out;
	}
	*data = buf;
	*len = n;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return rc;
}

/* ---- the wire walk ----
 *
 * Both lists are `repeated Entry entry = 1` with the code in the entry's
 * field 1. Unpacking a whole list with protobuf-c would allocate every
 * entry of a file that is mostly codes nobody asked for, so the top level
 * and each entry's own fields are walked here (checking every tag, varint
 * and length against the buffer) and only the wanted entries are handed to
 * protobuf-c. No recursion: the walk is two loops. */

typedef struct field {
	uint32_t num;
	unsigned wt;
	size_t at;           /* offset of the tag in the file */
	const uint8_t *data; /* wire type 2: the bytes */
	size_t len;
} field;

typedef struct walk {
	const uint8_t *base, *p, *end;
} walk;

static int varint(walk *w, uint64_t *v)
{
	uint64_t x = 0;
	for (unsigned shift = 0; shift < 64 && w->p < w->end; shift += 7) {
		uint8_t b = *w->p++;
		x |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1; /* truncated, or longer than the 10 bytes a varint may take */
}

/* Reads the next field. Returns 1 with f filled, 0 at the end, -1 with the
 * decoder error in reason. */
static int next(walk *w, field *f, char *reason, size_t rsize)
{
	if (w->p >= w->end)
		return 0;
	f->at = (size_t)(w->p - w->base);
	uint64_t key, v;
	if (varint(w, &key) < 0) {
		route_msg_format(reason, rsize, ROUTE_DEC_VARINT, f->at);
		return -1;
	}
	if (key >> 3 == 0 || key >> 3 > 0x1fffffff) { /* 1 .. 2^29-1 */
		route_msg_format(reason, rsize, ROUTE_DEC_FIELD_NUMBER, f->at);
		return -1;
	}
	f->num = (uint32_t)(key >> 3);
	f->wt = (unsigned)(key & 7);
	size_t room;
	switch (f->wt) {
	case 0:
		if (varint(w, &v) < 0) {
			route_msg_format(reason, rsize, ROUTE_DEC_VARINT, f->at);
			return -1;
		}
		return 1;
	case 1:
	case 5:
		room = f->wt == 1 ? 8 : 4;
		if ((size_t)(w->end - w->p) < room) {
			route_msg_format(reason, rsize, ROUTE_DEC_TRUNCATED, f->at);
			return -1;
		}
		w->p += room;
		return 1;
	case 2:
		if (varint(w, &v) < 0) {
			route_msg_format(reason, rsize, ROUTE_DEC_VARINT, f->at);
			return -1;
		}
		if (v > (uint64_t)(w->end - w->p)) {
			route_msg_format(reason, rsize, ROUTE_DEC_TRUNCATED, f->at);
			return -1;
		}
		f->data = w->p;
		f->len = (size_t)v;
		w->p += v;
		return 1;
	default: /* 3 and 4 are proto2 groups, which neither list uses; 6, 7 do not exist */
		route_msg_format(reason, rsize, ROUTE_DEC_WIRE_TYPE, f->wt, f->at);
		return -1;
	}
}

/* What a scan is looking for: base[i] (blen[i] bytes) for each code, and
 * after the scan found[i], the unpacked entry (shared between codes naming
 * the same entry; uniq lists each once for freeing). */
typedef struct wanted {
	size_t n;
	const char **base;
	size_t *blen;
	ProtobufCMessage **found;
	ProtobufCMessage **uniq;
	size_t nuniq;
} wanted;

static void wanted_free(wanted *w)
{
	for (size_t i = 0; i < w->nuniq; i++)
		protobuf_c_message_free_unpacked(w->uniq[i], NULL);
	free(w->base);
	free(w->blen);
	free(w->found);
	free(w->uniq);
	*w = (wanted){0};
}

static int wanted_init(wanted *w, size_t n)
{
	*w = (wanted){.n = n};
	w->base = calloc(n ? n : 1, sizeof *w->base);
	w->blen = calloc(n ? n : 1, sizeof *w->blen);
	w->found = calloc(n ? n : 1, sizeof *w->found);
	w->uniq = calloc(n ? n : 1, sizeof *w->uniq);
	if (!w->base || !w->blen || !w->found || !w->uniq) {
		wanted_free(w);
		return -1;
	}
	return 0;
}

/* Walks the list in buf and unpacks (with desc) the first entry for every
 * wanted code. Returns 0, or -1 with the decoder error in reason. */
static int scan(const uint8_t *buf, size_t len, const ProtobufCMessageDescriptor *desc,
                const char *msg_name, wanted *wt, char *reason, size_t rsize)
{
	walk top = {buf, buf, buf + len};
	field f;
	int r;
	while ((r = next(&top, &f, reason, rsize)) > 0) {
		if (f.num != 1)
			continue; /* unknown field: skipped, as protobuf says */
		if (f.wt != 2) {
			route_msg_format(reason, rsize, ROUTE_DEC_FIELD_TYPE, f.num, f.at, f.wt);
			return -1;
		}
		/* The entry's code: its last field 1 (protobuf's rule for a
		 * repeated scalar field), "" when absent. */
		walk in = {buf, f.data, f.data + f.len};
		const uint8_t *code = NULL;
		size_t code_len = 0;
		field g;
		int s;
		while ((s = next(&in, &g, reason, rsize)) > 0) {
			if (g.num != 1)
				continue;
			if (g.wt != 2) {
				route_msg_format(reason, rsize, ROUTE_DEC_FIELD_TYPE, g.num, g.at,
				                 g.wt);
				return -1;
			}
			code = g.data;
			code_len = g.len;
		}
		if (s < 0)
			return -1;

		ProtobufCMessage *msg = NULL;
		for (size_t i = 0; i < wt->n; i++) {
			if (wt->found[i] || !bytes_ascii_ieq(code, code_len, wt->base[i], wt->blen[i]))
				continue;
			if (!msg) {
				msg = protobuf_c_message_unpack(desc, NULL, f.len, f.data);
				if (!msg) {
					/* protobuf-c says only that it failed, not why. */
					char name[64];
					snprintf(name, sizeof name, "\"%.*s\"", (int)wt->blen[i],
					         wt->base[i]);
					route_msg_format(reason, rsize, ROUTE_DEC_ENTRY, name, f.at,
					                 msg_name);
					return -1;
				}
				wt->uniq[wt->nuniq++] = msg;
			}
			wt->found[i] = msg;
		}
	}
	return r < 0 ? -1 : 0;
}

/* Runs scan and turns its failures and missing codes into build errors. */
static int find(const uint8_t *buf, size_t len, const ProtobufCMessageDescriptor *desc,
                const char *msg_name, route_msg_id decode_err, route_msg_id missing_err,
                wanted *wt, char *err, size_t err_size)
{
	char reason[256];
	int r = scan(buf, len, desc, msg_name, wt, reason, sizeof reason);
	if (r < 0)
		return route_fail(err, err_size, decode_err, reason);
	for (size_t i = 0; i < wt->n; i++) {
		if (wt->found[i])
			continue;
		char *code = strndup(wt->base[i], wt->blen[i]);
		if (!code)
			return route_fail(err, err_size, ROUTE_ERR_NOMEM);
		r = route_fail(err, err_size, missing_err, code);
		free(code);
		return r;
	}
	return 0;
}

/* ---- geosite ---- */

/* Whether domain d carries every attribute of attrs, the text after a
 * code's first '@' ("ads", "ads@cn"). Keys compare ASCII case-insensitively;
 * an empty key ("code@", "code@a@") is one no domain carries. */
static bool has_attrs(const Geodata__Domain *d, const char *attrs)
{
	for (const char *p = attrs;;) {
		size_t klen = strcspn(p, "@");
		if (klen == 0)
			return false;
		bool found = false;
		for (size_t i = 0; i < d->n_attribute && !found; i++) {
			const char *key = d->attribute[i]->key;
			found = key && bytes_ascii_ieq(key, strlen(key), p, klen);
		}
		if (!found)
			return false;
		if (p[klen] == '\0')
			return true;
		p += klen + 1;
	}
}

static int site_build(const Geodata__GeoSite *site, const char *code, size_t base_len,
                      domset **out, char *err, size_t err_size)
{
	bool filter = code[base_len] == '@';
	const char *attrs = code + base_len + filter;
	domset *s = domset_new();
	if (!s)
		return route_fail(err, err_size, ROUTE_ERR_NOMEM);
	int rc = 0;
	for (size_t i = 0; i < site->n_domain; i++) {
		const Geodata__Domain *d = site->domain[i];
		if (filter && !has_attrs(d, attrs))
			continue;
		const char *v = d->value ? d->value : "";
		size_t vlen = strlen(v);
		int r = 0;
		char reason[256];
		switch ((int)d->type) {
		case GEODATA__DOMAIN__TYPE__Plain:
			r = domset_add_keyword(s, v, vlen);
			break;
		case GEODATA__DOMAIN__TYPE__RootDomain:
			r = domset_add_suffix(s, v, vlen);
			break;
		case GEODATA__DOMAIN__TYPE__Full:
			r = domset_add_full(s, v, vlen);
			break;
		case GEODATA__DOMAIN__TYPE__Regex:
			r = domset_add_regex(s, v, reason, sizeof reason);
			if (r == -2) {
				route_warn(ROUTE_WARN_GEOSITE_REGEX, v, reason);
				r = 0;
			} else if (r == 0 && domset_count_regexes(s) > GEODATA_REGEX_MAX) {
				char why[64];
				route_msg_format(why, sizeof why, ROUTE_REGEX_TOO_MANY,
				                 GEODATA_REGEX_MAX);
				char *name = strndup(code, base_len);
				rc = route_fail(err, err_size, ROUTE_ERR_GEOSITE_REGEX,
				                name ? name : code, why);
				free(name);
				goto fail;
			}
			break;
		default:
			route_warn(ROUTE_WARN_GEOSITE_TYPE, (int)d->type);
			break;
		}
		if (r < 0) {
			rc = route_fail(err, err_size, ROUTE_ERR_NOMEM);
			goto fail;
		}
	}
	if (domset_seal(s) < 0) {
		rc = route_fail(err, err_size, ROUTE_ERR_NOMEM);
		goto fail;
	}
	*out = s;
	return 0;
fail:
	domset_del(s);
	return rc;
}

int geodata_sites(const uint8_t *buf, size_t len, const char *const *codes, size_t n,
                  domset **sets, char *err, size_t err_size)
{
	for (size_t i = 0; i < n; i++)
		sets[i] = NULL;
	wanted wt;
	if (wanted_init(&wt, n) < 0)
		return route_fail(err, err_size, ROUTE_ERR_NOMEM);
	for (size_t i = 0; i < n; i++) {
		wt.base[i] = codes[i];
		wt.blen[i] = strcspn(codes[i], "@");
	}
	int rc = find(buf, len, &geodata__geo_site__descriptor, "GeoSite",
	              ROUTE_ERR_GEOSITE_DECODE, ROUTE_ERR_GEOSITE_NOT_FOUND, &wt, err, err_size);
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = site_build((const Geodata__GeoSite *)wt.found[i], codes[i], wt.blen[i],
		                &sets[i], err, err_size);
	if (rc < 0) {
		for (size_t i = 0; i < n; i++) {
			domset_del(sets[i]);
			sets[i] = NULL;
		}
	}
	wanted_free(&wt);
	return rc;
}

/* ---- geoip ---- */

static int ip_build(const Geodata__GeoIP *g, ipset **out, char *err, size_t err_size)
{
	ipset *s = ipset_new();
	if (!s)
		return route_fail(err, err_size, ROUTE_ERR_NOMEM);
	int rc = 0;
	for (size_t i = 0; i < g->n_cidr; i++) {
		const Geodata__CIDR *c = g->cidr[i];
		size_t alen = c->ip.len;
		if (alen != 4 && alen != 16) {
			rc = route_fail(err, err_size, ROUTE_ERR_GEOIP_IP_LEN, alen);
			goto fail;
		}
		if (c->prefix > UINT8_MAX) {
			rc = route_fail(err, err_size, ROUTE_ERR_GEOIP_PREFIX_LARGE);
			goto fail;
		}
		unsigned bits = alen == 4 ? 32 : 128;
		if (c->prefix > bits) {
			rc = route_fail(err, err_size, ROUTE_ERR_GEOIP_PREFIX, (unsigned)c->prefix,
			                bits, alen == 4 ? 4u : 6u);
			goto fail;
		}
		if (ipset_add(s, c->ip.data, alen, c->prefix) < 0) {
			rc = route_fail(err, err_size, ROUTE_ERR_NOMEM);
			goto fail;
		}
	}
	ipset_seal(s);
	*out = s;
	return 0;
fail:
	ipset_del(s);
	return rc;
}

int geodata_ips(const uint8_t *buf, size_t len, const char *const *codes, size_t n,
                ipset **sets, bool *invert, char *err, size_t err_size)
{
	for (size_t i = 0; i < n; i++) {
		sets[i] = NULL;
		invert[i] = false;
	}
	wanted wt;
	if (wanted_init(&wt, n) < 0)
		return route_fail(err, err_size, ROUTE_ERR_NOMEM);
	for (size_t i = 0; i < n; i++) {
		bool neg = codes[i][0] == '!';
		wt.base[i] = codes[i] + neg;
		wt.blen[i] = strlen(wt.base[i]);
	}
	int rc = find(buf, len, &geodata__geo_ip__descriptor, "GeoIP", ROUTE_ERR_GEOIP_DECODE,
	              ROUTE_ERR_GEOIP_NOT_FOUND, &wt, err, err_size);
	for (size_t i = 0; i < n && rc == 0; i++) {
		const Geodata__GeoIP *g = (const Geodata__GeoIP *)wt.found[i];
		/* v2ray sets inverse_match itself for "!code"; a file that sets it
		 * means the same, so the two flip each other. */
		invert[i] = (codes[i][0] == '!') != (bool)g->inverse_match;
		rc = ip_build(g, &sets[i], err, err_size);
	}
	if (rc < 0) {
		for (size_t i = 0; i < n; i++) {
			ipset_del(sets[i]);
			sets[i] = NULL;
			invert[i] = false;
		}
	}
	wanted_free(&wt);
	return rc;
}
