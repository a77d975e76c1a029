/* engine.c - library-wide facts: the version. */
#include "etemenanki/etemenanki.h"

const char *etm_version(void) { return ETM_VERSION; }
