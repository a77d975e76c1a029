/* specload.h - a spec from TOML text for the tests of the build step, through the app's config loader; a config that does not load fails the test with the loader's message. Needs cmocka, included before this header. */
#ifndef ETM_TESTS_SPECLOAD_H
#define ETM_TESTS_SPECLOAD_H

#include <string.h>

#include "app/config.h"

/* Fills *s from toml (checked, as a start would take it); the caller frees
 * it with etm_spec_free. */
static inline void load_spec(const char *toml, etm_spec *s)
{
	char msg[CONFIG_MSG_MAX];
	if (config_load(toml, strlen(toml), s, msg, sizeof msg))
		fail_msg("the config does not load:\n%s", msg);
}

#endif
