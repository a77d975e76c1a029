/* cli.h - etemenanki-app's command line: options, --test, start, exit codes. */
#ifndef ETM_APP_CLI_H
#define ETM_APP_CLI_H

#include <stdio.h>

#include "etemenanki/spec.h"

/* Runs the program for argv and returns the process exit code: 0 on success,
 * 1 when the configuration is invalid or the start fails, 2 on a usage error.
 * Normal output goes to out, errors to err (both borrowed). */
int cli_main(int argc, char **argv, FILE *out, FILE *err);

/* The config's [log] level as log.h's. */
int log_level_of(etm_log_level l);

/* The config's [log] format as log.h's. */
int log_format_of(etm_log_format f);

#endif
