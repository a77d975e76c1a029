/* config.h - the TOML config file lowered into an etm_spec, with errors that point at the line. */
#ifndef ETM_APP_CONFIG_H
#define ETM_APP_CONFIG_H

#include <stddef.h>

#include "etemenanki/spec.h"

/* Longest message a load can produce: the position header, the excerpt of
 * one source line (cut at CONFIG_EXCERPT_MAX bytes) and the detail. */
#define CONFIG_MSG_MAX 1024
#define CONFIG_EXCERPT_MAX 160

/* Parses and lowers len bytes of TOML into *spec (which must be zeroed), then
 * runs etm_spec_check. Returns 0, or -1 with the message for the user in msg:
 * a TOML parse error or a schema error reads
 *
 *     TOML parse error at line 5, column 1
 *       |
 *     5 | probe_intervall = 15
 *       | ^^^^^^^^^^^^^^^
 *     unknown field `probe_intervall`, expected one of `tag`, ...
 *
 * and a semantic error is the spec check's message alone. On failure *spec
 * is freed and zeroed. The text is borrowed for the call only. */
__attribute__((warn_unused_result)) int config_load(const char *text, size_t len, etm_spec *spec,
                                                    char *msg, size_t msg_size);

/* Reads the file at path and loads it as config_load does. A read failure
 * reads "failed to read <path>: <reason>". */
__attribute__((warn_unused_result)) int config_load_file(const char *path, etm_spec *spec, char *msg,
                                                         size_t msg_size);

/* The config's [log] level and format as log.h's. */
int config_log_level(etm_log_level l);
int config_log_format(etm_log_format f);

#endif
