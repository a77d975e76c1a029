/* fuzz_config.c - libFuzzer target: any bytes through the whole config lowering and checks. */
#include <stddef.h>
#include <stdint.h>

#include "app/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	etm_spec spec;
	char msg[CONFIG_MSG_MAX];
	if (config_load((const char *)data, size, &spec, msg, sizeof msg) == 0)
		etm_spec_free(&spec);
	return 0;
}
