/* geodata.h - v2ray geosite.dat / geoip.dat: reading a file (the route module's one I/O) and decoding bytes into matcher sets. */
#ifndef ETM_ROUTE_GEODATA_H
#define ETM_ROUTE_GEODATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "route/domset.h"
#include "route/ipset.h"

/* Largest geodata file read. The full v2fly and Loyalsoldier lists are
 * 5-20 MiB; sixteen times that leaves room to grow while keeping a wrong
 * path (a disk image, /dev/zero) from eating memory. */
#define GEODATA_FILE_MAX_MIB 256u
#define GEODATA_FILE_MAX ((size_t)GEODATA_FILE_MAX_MIB << 20)

/* Regex entries one geosite code may bring, after invalid ones are skipped.
 * Each is compiled and run on its own, so this bounds both the memory a
 * code's patterns take and what one decision can spend in them. The
 * published lists carry at most a few dozen per code. */
#define GEODATA_REGEX_MAX 4096u

/* Reads the whole file at path into *data (owned by the caller, free()) and
 * *len. kind ("geosite", "geoip") names the file in the size error. Returns
 * 0, or a negative route_msg_id with the build error text in err:
 * ROUTE_ERR_OS (strerror and errno, without the path, as the seed prints
 * it), ROUTE_ERR_FILE_TOO_LARGE, ROUTE_ERR_NOMEM. */
__attribute__((warn_unused_result)) int geodata_read_file(const char *path, const char *kind,
                                                          uint8_t **data, size_t *len,
                                                          char *err, size_t err_size);

/* Decodes the GeoSiteList in buf and builds sets[i] for codes[i], a
 * geosite matcher as written: "code", or "code@attr" (only the domains
 * carrying attribute attr; "code@a@b" needs both). Codes and attribute keys
 * compare ASCII case-insensitively; the first entry with a code is the one
 * used. Entries of other codes are walked but not unpacked. Domain types:
 * Plain -> keyword, Regex -> regex, RootDomain -> suffix, Full -> full name;
 * an unknown type or a pattern PCRE2 refuses is logged at warn and skipped.
 * Returns 0 with every sets[i] set (owned by the caller), or a negative
 * route_msg_id with every sets[i] NULL and the build error in err:
 * ROUTE_ERR_GEOSITE_DECODE, ROUTE_ERR_GEOSITE_NOT_FOUND,
 * ROUTE_ERR_GEOSITE_REGEX, ROUTE_ERR_NOMEM. */
__attribute__((warn_unused_result)) int geodata_sites(const uint8_t *buf, size_t len,
                                                      const char *const *codes, size_t n,
                                                      domset **sets, char *err,
                                                      size_t err_size);

/* Decodes the GeoIPList in buf and builds sets[i] for codes[i], a geoip
 * matcher as written: "code" or "!code". invert[i] is true for "!code"
 * (flipped again when the file's entry has inverse_match set). Returns 0,
 * or a negative route_msg_id with every sets[i] NULL and the error in err:
 * ROUTE_ERR_GEOIP_DECODE, ROUTE_ERR_GEOIP_NOT_FOUND, ROUTE_ERR_GEOIP_IP_LEN,
 * ROUTE_ERR_GEOIP_PREFIX_LARGE, ROUTE_ERR_GEOIP_PREFIX, ROUTE_ERR_NOMEM. */
__attribute__((warn_unused_result)) int geodata_ips(const uint8_t *buf, size_t len,
                                                    const char *const *codes, size_t n,
                                                    ipset **sets, bool *invert, char *err,
                                                    size_t err_size);

#endif
