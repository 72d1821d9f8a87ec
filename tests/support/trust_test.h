/* SPDX-License-Identifier: MIT */
/*
 * trust_test.h - what the TLS and authentication tests share: certificates
 * and NATS keys made offline (tests/scripts/make_tls_material.sh,
 * mint_nats_keys.py; once per build tree, under a lock, since every test
 * process of a binary asks), and a nats-server of the test's own started
 * with a configuration (a tls {} block, users, an operator) on loopback.
 * Header-only (static inline) because it calls the harness, which only
 * the integration and fault binaries link.
 */
#ifndef OBX_TEST_TRUST_TEST_H
#define OBX_TEST_TRUST_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "devserver/devserver_probe.h"
#include "harness.h"
#include "harness_int.h" /* hx_run_dir(): the servers' files go with the run */

/* Where the material is kept: the build tree, so a rebuilt tree makes it anew. */
#define TRUST_DIR OBX_BIN_DIR "/../test-trust"

/* Path of `name` in the material (made on first use); valid until the next call. */
static inline const char *
trust_file(const char *name)
{
    static char path[600];
    char *tls[] = {"flock", TRUST_DIR ".lock", OBX_SOURCE_DIR "/tests/scripts/make_tls_material.sh",
                   TRUST_DIR "/tls", NULL};
    char *keys[] = {"flock",
                    TRUST_DIR ".lock",
                    "/usr/bin/python3",
                    OBX_SOURCE_DIR "/tests/scripts/mint_nats_keys.py",
                    TRUST_DIR "/keys",
                    NULL};
    int is_tls = strstr(name, ".pem") != NULL;
    struct stat st;

    /* Remade after a week (the scripts decide too), before the certificates' 30 days run out. */
    if (stat(is_tls ? TRUST_DIR "/tls/done" : TRUST_DIR "/keys/done", &st) != 0 ||
        st.st_mtime < time(NULL) - 6 * 86400) {
        cr_assert_eq(harness_run(is_tls ? tls : keys, NULL, 60000), 0, "making %s failed", name);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", TRUST_DIR, is_tls ? "tls" : "keys", name);
    return path;
}

/* The first line of a material file (a public key, a JWT), malloc'd. */
static inline char *
trust_read(const char *name)
{
    FILE *f = fopen(trust_file(name), "re");
    char *line = calloc(1, 8192);

    cr_assert(f != NULL && line != NULL, "cannot read %s", name);
    cr_assert_not_null(fgets(line, 8192, f));
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    return line;
}

/* A nats-server of the test's own. */
struct trust_nats {
    struct harness_proc proc;
    char dir[400]; /* in the run's directory: removed with it, whatever the test does */
    char url[96];  /* nats://127.0.0.1:<port> */
    int port;
};

/* Makes the server's directory and picks its port; files may go there before trust_nats_run(). */
static inline void
trust_nats_init(struct trust_nats *n)
{
    memset(n, 0, sizeof(*n));
    snprintf(n->dir, sizeof(n->dir), "%s/trust-nats-XXXXXX", hx_run_dir());
    cr_assert_not_null(mkdtemp(n->dir));
    n->port = obx_dev_free_port();
    snprintf(n->url, sizeof(n->url), "nats://127.0.0.1:%d", n->port);
}

/*
 * Starts nats-server -c with `body` after listen and jetstream (set here),
 * with `env` ("KEY=VALUE", NULL-terminated, may be NULL) added to its
 * environment, and waits until it is ready. Includes in `body` are relative
 * to the server's directory.
 */
static inline void
trust_nats_run(struct trust_nats *n, const char *body, char *const env[])
{
    char conf[500], *argv[] = {"nats-server", "-c", conf, NULL};
    FILE *f;

    snprintf(conf, sizeof(conf), "%s/server.conf", n->dir);
    f = fopen(conf, "we");
    cr_assert_not_null(f);
    fprintf(f, "listen: 127.0.0.1:%d\njetstream { store_dir: \"%s/js\" }\n%s\n", n->port, n->dir,
            body);
    cr_assert_eq(fclose(f), 0);
    harness_spawn(&n->proc, argv, env);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&n->proc, "Server is ready") ||
                           harness_proc_wait(&n->proc, 0) >= 0,
                       20000);
    cr_assert(harness_proc_log_contains(&n->proc, "Server is ready"),
              "nats-server did not start:\n%s\n%s", body, harness_proc_log(&n->proc));
}

/* trust_nats_init() then trust_nats_run() with no extra environment. */
static inline void
trust_nats_start(struct trust_nats *n, const char *body)
{
    trust_nats_init(n);
    trust_nats_run(n, body, NULL);
}

static inline void
trust_nats_stop(struct trust_nats *n)
{
    char *rm[] = {"rm", "-rf", n->dir, NULL};

    harness_proc_stop(&n->proc, 10000);
    if (n->dir[0] != '\0') {
        harness_run(rm, NULL, 30000);
    }
}

/* A file in the server's directory holding `text`; its path, malloc'd. */
static inline char *
trust_nats_write(const struct trust_nats *n, const char *name, const char *text)
{
    char *path = malloc(strlen(n->dir) + strlen(name) + 2);
    FILE *f;

    cr_assert_not_null(path);
    snprintf(path, strlen(n->dir) + strlen(name) + 2, "%s/%s", n->dir, name);
    f = fopen(path, "we");
    cr_assert_not_null(f);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    return path;
}

/* 1 if the file at `path` contains `needle` (binary-safe). */
static inline int
trust_file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rbe");
    size_t len = strlen(needle), cap = 1 << 20, used = 0, n;
    char *buf = malloc(cap);
    int found = 0;

    cr_assert(buf != NULL);
    if (f == NULL) {
        free(buf);
        return 0;
    }
    while ((n = fread(buf + used, 1, cap - used, f)) > 0) {
        used += n;
        if (used == cap) {
            buf = realloc(buf, cap *= 2);
            cr_assert(buf != NULL);
        }
    }
    fclose(f);
    for (size_t i = 0; !found && len <= used && i <= used - len; i++) {
        found = memcmp(buf + i, needle, len) == 0;
    }
    free(buf);
    return found;
}

#endif
