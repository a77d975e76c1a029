/* link_cmd.h - `etemenanki-app link import|export`: share links on the command line. */
#ifndef ETM_APP_LINK_CMD_H
#define ETM_APP_LINK_CMD_H

#include <stdio.h>

/* Runs `link ...` (argv[0] is "link") and returns the exit code: 0, 1 when
 * the config file is invalid or has nothing to export, 2 on a usage error
 * or a bad link. Output to out, errors to err (both borrowed). */
int link_cmd_main(int argc, char **argv, FILE *out, FILE *err);

#endif
