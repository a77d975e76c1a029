/* etemenanki.h - the engine library's public entry: version and the spec it runs. */
#ifndef ETEMENANKI_H
#define ETEMENANKI_H

#include "etemenanki/spec.h"

#define ETM_VERSION "0.1.0"

/* The library's version string, for front-ends that link it dynamically. */
const char *etm_version(void);

#endif
