/* SPDX-License-Identifier: MIT */
/*
 * main.c - placeholder entry point; replaced as the issue lands.
 */
#include <stdio.h>

int
main(void)
{
    fputs("not built yet\n", stderr);
    return 2;
}
