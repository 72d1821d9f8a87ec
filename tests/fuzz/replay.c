/* SPDX-License-Identifier: MIT */
/*
 * replay.c - runs every fuzz target on its seed corpus and its regression
 * inputs, without libFuzzer: the unit test unit.fuzz_replay, so the ASan
 * build of every CI run replays each crash the fuzzers ever found.
 *
 * Usage: fuzz_replay FUZZ_DIR DATA_DIR
 *   FUZZ_DIR/corpus/<target>/ and FUZZ_DIR/regressions/<target>/, and
 *   for the envelope target DATA_DIR/envelopes/{valid,invalid}/ too.
 * A target with no input at all fails the run: a renamed folder must not
 * turn the test into one that checks nothing.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

struct target {
    const char *name;
    int (*entry)(const uint8_t *data, size_t size);
    const char *data_dirs[2]; /* under DATA_DIR */
};

static const struct target targets[] = {
    {"envelope", obx_fuzz_envelope, {"envelopes/valid", "envelopes/invalid"}},
    {"message", obx_fuzz_message, {NULL, NULL}},
    {"fleet_file", obx_fuzz_fleet_file, {NULL, NULL}},
    {"handler_spec", obx_fuzz_handler_spec, {NULL, NULL}},
    {"url_list", obx_fuzz_url_list, {NULL, NULL}},
    {"setting", obx_fuzz_setting, {NULL, NULL}},
    {"nkey", obx_fuzz_nkey, {NULL, NULL}},
    {"secret_file", obx_fuzz_secret_file, {NULL, NULL}},
};

static unsigned char *
read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n;

    if (f == NULL) {
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1); /* + 1: a malloc of 0 may return NULL */
        if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *len = (size_t)n;
    }
    fclose(f);
    return buf;
}

/* Runs `t` on every regular file of `dir` (absent: none); returns how many. */
static size_t
replay_dir(const struct target *t, const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t runs = 0;

    if (d == NULL) {
        return 0;
    }
    while ((de = readdir(d)) != NULL) {
        char path[4096];
        struct stat st;
        unsigned char *data;
        size_t len = 0;

        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            continue;
        }
        data = read_all(path, &len);
        if (data == NULL) {
            fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
            exit(1);
        }
        fprintf(stderr, "%s\n", path); /* the input a crash below was running */
        t->entry(data, len);
        free(data);
        runs++;
    }
    closedir(d);
    return runs;
}

int
main(int argc, char **argv)
{
    int failed = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: fuzz_replay FUZZ_DIR DATA_DIR\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
        const struct target *t = &targets[i];
        char dir[4096];
        size_t corpus, regressions;

        snprintf(dir, sizeof(dir), "%s/corpus/%s", argv[1], t->name);
        corpus = replay_dir(t, dir);
        for (size_t k = 0; k < 2 && t->data_dirs[k] != NULL; k++) {
            snprintf(dir, sizeof(dir), "%s/%s", argv[2], t->data_dirs[k]);
            corpus += replay_dir(t, dir);
        }
        snprintf(dir, sizeof(dir), "%s/regressions/%s", argv[1], t->name);
        regressions = replay_dir(t, dir);
        printf("%-13s %4zu corpus inputs, %3zu regression inputs\n", t->name, corpus, regressions);
        if (corpus == 0) {
            fprintf(stderr, "fuzz_replay: target %s has no corpus\n", t->name);
            failed = 1;
        }
    }
    return failed;
}
