/* grpc.c - the gRPC call's rules: the service name, the request's and the response's verdicts, their texts. */
#include "transport/grpc.h"

#include <stdio.h>
#include <string.h>

enum {
	M_BAD_SERVICE,
	M_HTTP_STATUS,
	M_GRPC_STATUS,
	M_GRPC_STATUS_MSG,
	M_WRONG_PATH,
	M_BAD_METHOD,
	M_BAD_TYPE,
	M_CALM,
};

#define STR_(x) #x
#define STR(x) STR_(x)

static const char *const msgs[] = {
	[M_BAD_SERVICE] = "grpc: bad service name \"%s\"",
	[M_HTTP_STATUS] = "grpc: refused: HTTP status %s",
	[M_GRPC_STATUS] = "grpc: refused: grpc-status %s",
	[M_GRPC_STATUS_MSG] = "grpc: refused: grpc-status %s: %s",
	[M_WRONG_PATH] = "grpc: wrong path \"%s\" (expected \"%s\")",
	[M_BAD_METHOD] = "grpc: bad request: method %s",
	[M_BAD_TYPE] = "grpc: bad request: content-type \"%s\"",
	[M_CALM] = "grpc: more than " STR(GRPC_CALM_RATE) " frames without payload in a second "
	           "(PRIORITY, WINDOW_UPDATE, PING, SETTINGS, empty DATA, unknown types): "
	           "GOAWAY ENHANCE_YOUR_CALM",
};

bool grpc_service_name_ok(const char *name, char *err, size_t err_size)
{
	size_t n = name ? strlen(name) : 0;
	bool ok = n > 0 && n <= GRPC_SERVICE_MAX;
	for (size_t i = 0; ok && i < n; i++)
		ok = (unsigned char)name[i] > ' ' && name[i] != 0x7f && name[i] != '?' && name[i] != '#';
	if (!ok && err)
		snprintf(err, err_size, msgs[M_BAD_SERVICE], name ? name : "");
	return ok;
}

static void keep(char *to, size_t size, const uint8_t *v, size_t n)
{
	if (n >= size)
		n = size - 1;
	memcpy(to, v, n);
	to[n] = 0;
}

static bool is(const uint8_t *name, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(name, want, n) == 0;
}

void grpc_head_add(grpc_head *h, const uint8_t *name, size_t name_len, const uint8_t *value,
                   size_t value_len)
{
	if (is(name, name_len, ":path"))
		keep(h->path, sizeof h->path, value, value_len);
	else if (is(name, name_len, ":method"))
		keep(h->method, sizeof h->method, value, value_len);
	else if (is(name, name_len, "content-type"))
		keep(h->type, sizeof h->type, value, value_len);
	else if (is(name, name_len, ":status"))
		keep(h->status, sizeof h->status, value, value_len);
	else if (is(name, name_len, "grpc-status"))
		keep(h->grpc_status, sizeof h->grpc_status, value, value_len);
	else if (is(name, name_len, "grpc-message"))
		keep(h->grpc_message, sizeof h->grpc_message, value, value_len);
}

int grpc_check_request(const grpc_head *h, const char *path, const char **status,
                       const char **grpc_status, char *why, size_t why_size)
{
	*grpc_status = NULL;
	if (strcmp(h->method, "POST") != 0) {
		*status = "405";
		snprintf(why, why_size, msgs[M_BAD_METHOD], h->method);
		return -1;
	}
	/* "application/grpc", or with a subtype: "application/grpc+proto" */
	if (strncmp(h->type, "application/grpc", 16) != 0 ||
	    (h->type[16] && h->type[16] != '+' && h->type[16] != ';')) {
		*status = "415";
		snprintf(why, why_size, msgs[M_BAD_TYPE], h->type);
		return -1;
	}
	if (strcmp(h->path, path) != 0) {
		*status = "200";
		*grpc_status = "12"; /* UNIMPLEMENTED */
		snprintf(why, why_size, msgs[M_WRONG_PATH], h->path, path);
		return -1;
	}
	return 0;
}

int grpc_check_response(const grpc_head *h, char *why, size_t why_size)
{
	if (h->status[0] && strcmp(h->status, "200") != 0) {
		snprintf(why, why_size, msgs[M_HTTP_STATUS], h->status);
		return -1;
	}
	if (h->grpc_status[0] && strcmp(h->grpc_status, "0") != 0) {
		if (h->grpc_message[0])
			snprintf(why, why_size, msgs[M_GRPC_STATUS_MSG], h->grpc_status, h->grpc_message);
		else
			snprintf(why, why_size, msgs[M_GRPC_STATUS], h->grpc_status);
		return -1;
	}
	return 0;
}

/* RFC 9113 section 6: the frame types. */
enum { T_DATA = 0x0, T_PRIORITY = 0x2, T_SETTINGS = 0x4, T_PING = 0x6, T_WINDOW_UPDATE = 0x8,
       T_LAST_KNOWN = 0x9 };

#define F_END_STREAM 0x1

static bool counted(uint8_t type, size_t length, uint8_t flags)
{
	switch (type) {
	case T_DATA:
		return length == 0 && !(flags & F_END_STREAM);
	case T_PRIORITY:
	case T_SETTINGS:
	case T_PING:
	case T_WINDOW_UPDATE:
		return true;
	default:
		return type > T_LAST_KNOWN;
	}
}

int grpc_calm_frame(grpc_calm *b, uint8_t type, size_t length, uint8_t flags, uint64_t now_ms)
{
	if (b->over)
		return -1;
	if (!counted(type, length, flags))
		return 0;
	if (now_ms > b->last_ms) {
		uint64_t refill = (now_ms - b->last_ms) * (GRPC_CALM_RATE / 1000);
		b->spent = refill >= b->spent ? 0 : b->spent - refill;
		b->last_ms = now_ms;
	}
	if (++b->spent > GRPC_CALM_BURST) {
		b->over = true;
		return -1;
	}
	return 0;
}

const char *grpc_calm_message(void) { return msgs[M_CALM]; }
