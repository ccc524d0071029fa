/* main.c - the kiln command-line tool: dispatches to subcommands. */
#include "kiln.h"

#include <stdio.h>

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("kiln %s\n", KILN_VERSION_STRING);
    return 0;
}
