/* main.c - etemenanki-app: the thin front-end over libetemenanki. */
#include <stdio.h>

#include "app/cli.h"

int main(int argc, char **argv) { return cli_main(argc, argv, stdout, stderr); }
