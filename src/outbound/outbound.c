/* outbound.c - dispatch of connect_stream by protocol. */
#include "outbound/outbound.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outbound/freedom_udp.h"
#include "runtime/dial.h"

static const char *const msgs[] = {
	"outbound %s: protocol %s is not available yet",
	"out of memory",
};

/* Source of outbound ids; a fan-out keys its sub-links by them. */
static atomic_uint_fast64_t next_id = 1;

outbound *outbound_new(const etm_outbound_spec *spec, char *err, size_t err_size)
{
	if (!etm_protocol_available(spec->protocol, false)) {
		snprintf(err, err_size, msgs[0], spec->tag, etm_protocol_name(spec->protocol));
		return NULL;
	}
	outbound *o = calloc(1, sizeof *o);
	if (o)
		o->tag = strdup(spec->tag);
	if (!o || !o->tag) {
		free(o);
		snprintf(err, err_size, "%s", msgs[1]);
		return NULL;
	}
	o->id = atomic_fetch_add(&next_id, 1);
	o->protocol = spec->protocol;
	o->af = spec->address_family;
	return o;
}

void outbound_del(outbound *o)
{
	if (!o)
		return;
	free(o->tag);
	free(o);
}

connect_pending *outbound_connect_stream(const outbound *o, worker *w, dns_resolver *dns,
                                         const addr_dest *dest, connect_cb cb, void *data)
{
	switch (o->protocol) {
	case ETM_PROTO_FREEDOM: {
		connect_pending *d = dial_tcp(w, dns, dest, o->af, cb, data);
		if (!d)
			cb(&(connect_result){.msg = msgs[1]}, data);
		return d;
	}
	case ETM_PROTO_BLACKHOLE:
		cb(&(connect_result){.ok = true, .blackhole = true}, data);
		return NULL;
	default:
		/* outbound_new refuses what is not built */
		cb(&(connect_result){.msg = "protocol not available"}, data);
		return NULL;
	}
}

dgram_link *outbound_connect_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                      const dgram_handlers *h, void *ud, char *err,
                                      size_t err_size)
{
	switch (o->protocol) {
	case ETM_PROTO_FREEDOM:
		return freedom_udp_open(w, dns, o->af, h, ud, err, err_size);
	case ETM_PROTO_BLACKHOLE:
		return blackhole_udp_open();
	default:
		snprintf(err, err_size, "%s carries no datagrams", etm_protocol_name(o->protocol));
		return NULL;
	}
}
