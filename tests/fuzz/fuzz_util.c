/* SPDX-License-Identifier: MIT */
/* fuzz_util.c - what the fuzz targets share (fuzz.h). */
#define _GNU_SOURCE /* memfd_create, memmem */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

char *
obx_fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);

    obx_fuzz_require(s != NULL, "out of memory");
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

int
obx_fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t cap)
{
    int fd = memfd_create("obx-fuzz", MFD_CLOEXEC);
    size_t done = 0;

    obx_fuzz_require(fd >= 0, "memfd_create");
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);

        obx_fuzz_require(n > 0, "write to memfd");
        done += (size_t)n;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

void
obx_fuzz_require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz invariant broken: %s\n", what);
        abort();
    }
}

static int
alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Overwrites the alphanumeric run at `p` with 'x'; 1 if there was one. */
static int
blank_run(char *p)
{
    int any = 0;

    for (; alnum(*p); p++) {
        *p = 'x';
        any = 1;
    }
    return any;
}

size_t
obx_fuzz_blank_passwords(char *text, size_t len)
{
    size_t blanked = 0;

    /* Text holding the mask itself: messages hide what of it the masked input
     * lacks, so the two answers may differ with nothing shown. */
    if (memmem(text, len, "***", 3) != NULL) {
        return 0;
    }

    for (size_t i = 0; i < len; i++) {
        char before = i > 0 ? text[i - 1] : ' ';

        /* password=SECRET, as a libpq word or a URL query parameter */
        if ((before == ' ' || before == '?' || before == '&') && len - i > 9 &&
            memcmp(text + i, "password=", 9) == 0) {
            blanked += (size_t)blank_run(text + i + 9);
        }
        /* scheme://USER:SECRET@ with a plain user name */
        if (len - i > 3 && memcmp(text + i, "://", 3) == 0) {
            size_t u = i + 3, p;

            while (u < len && alnum(text[u])) {
                u++;
            }
            if (u > i + 3 && u < len && text[u] == ':') {
                for (p = u + 1; p < len && alnum(text[p]); p++) {
                }
                if (p > u + 1 && p < len && text[p] == '@') {
                    blanked += (size_t)blank_run(text + u + 1);
                }
            }
        }
    }
    return blanked;
}
