/* cli.h - etemenanki-app's command line: options, --test, start, exit codes. */
#ifndef ETM_APP_CLI_H
#define ETM_APP_CLI_H

#include <stdio.h>

#include "etemenanki/spec.h"

/* A start refused the configuration file (it cannot be read, parsed or
 * checked, or names what this build cannot run): sysexits.h's EX_CONFIG.
 * dist/etemenanki.service's RestartPreventExitStatus= names it, so systemd
 * does not restart a broken config in a loop. --test says 1. */
#define CLI_EXIT_CONFIG 78

/* Runs the program for argv and returns the process exit code: 0 on success,
 * 1 when --test finds the configuration invalid or the start fails,
 * CLI_EXIT_CONFIG when a start finds it invalid, 2 on a usage error.
 * Normal output goes to out, errors to err (both borrowed). */
int cli_main(int argc, char **argv, FILE *out, FILE *err);

#endif
