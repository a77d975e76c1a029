/* fuzz_geodata.c - libFuzzer target: arbitrary bytes decoded as geosite.dat and as geoip.dat, and the sets built from them queried. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/log.h"
#include "route/geodata.h"

/* Codes a mutated file can plausibly hold: short ones the fuzzer finds by
 * itself, attribute filters, inversion, and the empty code (an entry with no
 * country_code). */
static const char *const site_codes[] = {"a", "A@x", "cn", "b@x@y", ""};
static const char *const ip_codes[] = {"a", "!A", "cn", "!b"};
#define NSITES (sizeof site_codes / sizeof site_codes[0])
#define NIPS (sizeof ip_codes / sizeof ip_codes[0])

static void query_sites(domset **sets, const uint8_t *data, size_t size)
{
	domset_name names[2];
	size_t nn = 0;
	if (domset_name_prepare(&names[nn], "www.example.com", 15))
		nn++;
	/* The input's first bytes as a name too, so matching sees odd bytes. */
	size_t len = size < DOMSET_NAME_MAX ? size : DOMSET_NAME_MAX;
	if (domset_name_prepare(&names[nn], (const char *)data, len))
		nn++;
	for (size_t i = 0; i < NSITES; i++)
		for (size_t k = 0; k < nn; k++)
			(void)domset_match(sets[i], &names[k]);
}

static void query_ips(ipset **sets, const uint8_t *data, size_t size)
{
	ipset_addr addrs[3];
	uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8};
	ipset_addr_from_bytes(&addrs[0], (const uint8_t[]){10, 1, 2, 3}, 4);
	ipset_addr_from_bytes(&addrs[1], v6, 16);
	if (size >= 16)
		ipset_addr_from_bytes(&addrs[2], data, 16);
	else
		ipset_addr_from_bytes(&addrs[2], v6, 16);
	for (size_t i = 0; i < NIPS; i++)
		for (size_t k = 0; k < 3; k++)
			(void)ipset_has(sets[i], &addrs[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool quiet;
	if (!quiet) {
		log_set_level(LOG_LEVEL_ERROR); /* skipped entries warn; not worth printing here */
		quiet = true;
	}
	char err[512];

	domset *sites[NSITES];
	if (geodata_sites(data, size, site_codes, NSITES, sites, err, sizeof err) == 0) {
		query_sites(sites, data, size);
		for (size_t i = 0; i < NSITES; i++)
			domset_del(sites[i]);
	}

	ipset *ips[NIPS];
	bool invert[NIPS];
	if (geodata_ips(data, size, ip_codes, NIPS, ips, invert, err, sizeof err) == 0) {
		query_ips(ips, data, size);
		for (size_t i = 0; i < NIPS; i++)
			ipset_del(ips[i]);
	}
	return 0;
}
