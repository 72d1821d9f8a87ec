/* SPDX-License-Identifier: MIT */
/*
 * test_pg_tls_secrets.c - PostgreSQL over TLS with sslmode=verify-full
 * against the run's server turned to ssl=on with a test CA's certificate,
 * for a role that must sign in with a password over TLS (pg_hba hostssl,
 * scram-sha-256); the password comes from a file, as container secrets
 * are mounted: the whole URL in OUTBOX_DATABASE_URL_FILE, or PGPASSFILE.
 * A wrong CA is refused. Then every place a secret could leak is read for
 * the database password and the NATS token: the daemons' logs, /metrics,
 * /healthz and /readyz, error messages (wrong password, wrong token),
 * outboxctl's output (status, doctor, an error) and /proc/PID/cmdline.
 */
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "ctl_test.h"
#include "devserver/devserver_probe.h"
#include "harness.h"
#include "http_get.h"
#include "relay_test.h"
#include "trust_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define PG_PASSWORD "pg-pw-Vn2x-secret"
#define NATS_TOKEN  "nats-token-Hd7q-secret"

static PGconn *conn;

/* Copies a material file to `dir`, owned by postgres (the server runs as it when we are root). */
static void
give(const char *dir, const char *name, char *out, size_t cap)
{
    char *argv[] = {"install", "-m", "0600", (char *)trust_file(name), out, NULL};
    struct passwd *pw = getpwnam("postgres");

    snprintf(out, cap, "%s/%s", dir, name);
    cr_assert_eq(harness_run(argv, NULL, 10000), 0);
    if (geteuid() == 0 && pw != NULL) {
        cr_assert_eq(chown(out, pw->pw_uid, pw->pw_gid), 0);
    }
}

/*
 * ssl=on with the test CA's server certificate, and role trust_pw that
 * signs in only over TLS with a password. Once per server (the first test
 * process of the binary does it, under a lock; the rest find it done).
 */
static void
pg_tls_enable(void)
{
    char dir[600], crt[700], key[700], sql[1200], *hba;
    int lock = open(TRUST_DIR ".lock", O_CREAT | O_RDWR | O_CLOEXEC, 0600);

    (void)harness_pg_port();        /* skips unless the run's server is ours */
    (void)trust_file("server.pem"); /* made before the lock: making it takes the lock too */
    cr_assert(lock >= 0 && flock(lock, LOCK_EX) == 0);
    if (harness_scalar_ll(conn, "SELECT count(*) FROM pg_roles WHERE rolname = 'trust_pw'") == 0) {
        hba = harness_scalar_text(conn, "SHOW hba_file");
        snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(hba, '/') - hba), hba);
        give(dir, "server.pem", crt, sizeof(crt));
        give(dir, "server-key.pem", key, sizeof(key));
        /* pg_hba.conf is read top down: trust_pw's lines go before the harness's trust lines. */
        snprintf(sql, sizeof(sql),
                 "sed -i '1i hostssl all trust_pw all scram-sha-256\\nhost all "
                 "trust_pw all reject' %s",
                 hba);
        {
            char *argv[] = {"sh", "-c", sql, NULL};

            cr_assert_eq(harness_run(argv, NULL, 10000), 0);
        }
        snprintf(sql, sizeof(sql), "ALTER SYSTEM SET ssl_cert_file = '%s'", crt);
        harness_exec(conn, sql);
        snprintf(sql, sizeof(sql), "ALTER SYSTEM SET ssl_key_file = '%s'", key);
        harness_exec(conn, sql);
        harness_exec(conn, "ALTER SYSTEM SET ssl = on");
        harness_exec(conn, "CREATE ROLE trust_pw LOGIN SUPERUSER PASSWORD '" PG_PASSWORD "'");
        harness_exec(conn, "SELECT pg_reload_conf()");
        free(hba);
    }
    HARNESS_WAIT_UNTIL(harness_scalar_ll(conn, "SELECT (current_setting('ssl') = 'on')::int") == 1,
                       10000);
    flock(lock, LOCK_UN);
    close(lock);
}

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
    pg_tls_enable();
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(pg_tls, .init = setup, .fini = teardown, .timeout = 180);

/* postgresql://trust_pw[:password]@localhost:port/<test db>?sslmode=verify-full&sslrootcert=<ca>.
 */
static void
tls_url(char *out, size_t cap, const char *password, const char *ca)
{
    snprintf(out, cap,
             "postgresql://trust_pw%s%s@localhost:%d/%s?sslmode=verify-full&sslrootcert=%s",
             password != NULL ? ":" : "", password != NULL ? password : "", harness_pg_port(),
             PQdb(conn), trust_file(ca));
}

/* A file in the build tree's material folder holding `text` (mode 0600, as libpq wants). */
static char *
secret_file(const char *name, const char *text)
{
    char *path = malloc(700);
    FILE *f;

    cr_assert_not_null(path);
    snprintf(path, 700, "%s/%s-%d", TRUST_DIR, name, (int)getpid());
    f = fopen(path, "we");
    cr_assert_not_null(f);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(path, 0600), 0);
    return path;
}

/* Settings for the database over TLS with the URL (password inside) in a file. */
static char *
url_file_env(struct relay_env *env, const char *stream, const char *password, const char *ca)
{
    char url[800], prefix[40];
    char *file;

    snprintf(prefix, sizeof(prefix), "%s", stream);
    for (char *p = prefix; *p != '\0'; p++) {
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p == '_' ? 'x' : *p);
    }
    relay_test_env(env, stream, prefix);
    tls_url(url, sizeof(url) - 1, password, ca);
    url[strlen(url) + 1] = '\0';
    url[strlen(url)] = '\n';
    file = secret_file("database-url", url);
    relay_env_set(env, "OUTBOX_DATABASE_URL", "");
    relay_env_set(env, "OUTBOX_DATABASE_URL_FILE", file);
    return file;
}

Test(pg_tls, verify_full_with_a_test_ca_and_the_password_from_a_file)
{
    static const char *const handlers[] = {CONSUME_EFFECT("effect"), NULL};
    struct relay_env renv, cenv;
    struct harness_proc relay, consumer;
    struct ctl_run r;
    char url[800], pass[300], *url_file, *pass_file;

    url_file = url_file_env(&renv, "PG_TLS", PG_PASSWORD, "ca.pem");
    /* The consumer's password comes from PGPASSFILE instead, its URL without one. */
    consume_test_env(&cenv, "jetstream", "PG_TLS", "pgxtls", "G_PG_TLS");
    tls_url(url, sizeof(url), NULL, "ca.pem");
    relay_env_set(&cenv, "OUTBOX_DATABASE_URL", url);
    snprintf(pass, sizeof(pass), "localhost:%d:%s:trust_pw:%s\n", harness_pg_port(), PQdb(conn),
             PG_PASSWORD);
    pass_file = secret_file("pgpass", pass);
    relay_env_set(&cenv, "PGPASSFILE", pass_file);

    relay_test_start(&relay, &renv, "relay-pgtls");
    consume_test_start(&consumer, &cenv, "consumer-pgtls", handlers);
    relay_test_enqueue(conn, 50);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "effect") == 50, 30000);
    consume_test_expect_exactly_once(conn, "effect");
    cr_assert_eq(harness_scalar_ll(conn, "SELECT count(*) FROM pg_stat_activity a JOIN "
                                         "pg_stat_ssl s USING (pid) WHERE a.usename = 'trust_pw' "
                                         "AND NOT s.ssl"),
                 0, "a connection of trust_pw is not encrypted");
    cr_assert_gt(harness_scalar_ll(conn, "SELECT count(*) FROM pg_stat_activity a JOIN "
                                         "pg_stat_ssl s USING (pid) WHERE a.usename = 'trust_pw' "
                                         "AND s.ssl"),
                 0);
    ctl_expect(&r, &renv, 0, (const char *const[]){"status", "--json", NULL});
    ctl_run_fini(&r);
    consume_test_stop(&consumer, 10000);
    relay_test_stop(&relay, 10000);
    relay_env_fini(&cenv);
    relay_env_fini(&renv);
    remove(url_file);
    remove(pass_file);
    free(url_file);
    free(pass_file);

    /* A server certificate from another CA is refused, and the error says why. */
    url_file = url_file_env(&renv, "PG_TLS", PG_PASSWORD, "other-ca.pem");
    ctl_run(&r, &renv, (const char *const[]){"status", NULL});
    cr_assert_neq(r.status, 0, "verify-full accepted a certificate of another CA:\n%s", r.out);
    cr_assert(strstr(r.out, "certificate verify failed") != NULL, "%s", r.out);
    cr_assert(strstr(r.out, PG_PASSWORD) == NULL, "%s", r.out);
    ctl_run_fini(&r);
    relay_env_fini(&renv);
    remove(url_file);
    free(url_file);
}

/* Fails the test if `text` (from `where`) holds a secret. */
static void
expect_clean(const char *where, const char *text)
{
    cr_assert(text != NULL, "nothing read from %s", where);
    cr_assert(strstr(text, PG_PASSWORD) == NULL, "%s shows the database password:\n%s", where,
              text);
    cr_assert(strstr(text, NATS_TOKEN) == NULL, "%s shows the NATS token:\n%s", where, text);
}

/* /proc/PID/cmdline, its NULs made blanks. */
static char *
cmdline(pid_t pid)
{
    char path[64], *text = calloc(1, 8192);
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    f = fopen(path, "re");
    cr_assert(f != NULL && text != NULL);
    n = fread(text, 1, 8191, f);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        text[i] = text[i] == '\0' ? ' ' : text[i];
    }
    return text;
}

/* GETs `path` from a daemon's HTTP port and checks the body. */
static void
expect_clean_http(int port, const char *path)
{
    char *body = NULL, where[64];

    HARNESS_WAIT_UNTIL(http_get(port, path, &body) != 0, 10000);
    snprintf(where, sizeof(where), "GET %s", path);
    expect_clean(where, body);
    free(body);
}

static int
handled_all(void *arg)
{
    (void)arg;
    return consume_test_handled(conn, "effect") == 20;
}

Test(pg_tls, no_secret_in_logs_metrics_errors_outboxctl_doctor_or_the_command_line)
{
    static const char *const handlers[] = {CONSUME_EFFECT("effect"), NULL};
    struct trust_nats n;
    struct relay_env renv, cenv;
    struct harness_proc relay, consumer;
    struct ctl_run r;
    char addr[32], *url_file, *token_file, *bad_file, *text;
    int relay_port, consumer_port;

    trust_nats_start(&n, "authorization { token: \"" NATS_TOKEN "\" }");
    /* Picked after the server's: the same millisecond would give the same port. */
    relay_port = http_free_port();
    do {
        consumer_port = http_free_port();
    } while (consumer_port == relay_port || consumer_port == n.port);
    token_file = secret_file("token", NATS_TOKEN "\n");
    url_file = url_file_env(&renv, "PG_SECRETS", PG_PASSWORD, "ca.pem");
    relay_env_set(&renv, "OUTBOX_NATS_URL", n.url);
    relay_env_set(&renv, "OUTBOX_NATS_TOKEN_FILE", token_file);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", relay_port);
    relay_env_set(&renv, "OUTBOX_HTTP_ADDR", addr);
    consume_test_env(&cenv, "jetstream", "PG_SECRETS", "pgxsecrets", "G_PG_SECRETS");
    relay_env_set(&cenv, "OUTBOX_DATABASE_URL", "");
    relay_env_set(&cenv, "OUTBOX_DATABASE_URL_FILE", url_file);
    relay_env_set(&cenv, "OUTBOX_NATS_URL", n.url);
    relay_env_set(&cenv, "OUTBOX_NATS_TOKEN_FILE", token_file);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", consumer_port);
    relay_env_set(&cenv, "OUTBOX_HTTP_ADDR", addr);

    relay_test_start(&relay, &renv, "relay-secrets");
    consume_test_start(&consumer, &cenv, "consumer-secrets", handlers);
    relay_test_enqueue(conn, 20);
    if (!harness_wait_until(handled_all, NULL, 30000)) {
        cr_assert_fail("not handled; relay:\n%s\nconsumer:\n%s",
                       consume_test_log_tail(&relay, 3000), consume_test_log_tail(&consumer, 3000));
    }
    for (int i = 0; i < 2; i++) {
        int port = i == 0 ? relay_port : consumer_port;

        expect_clean_http(port, "/metrics");
        expect_clean_http(port, "/healthz");
        expect_clean_http(port, "/readyz");
    }
    text = cmdline(relay.pid);
    expect_clean("the relay's command line", text);
    free(text);
    text = cmdline(consumer.pid);
    expect_clean("the consumer's command line", text);
    free(text);

    ctl_run(&r, &renv, (const char *const[]){"status", "--json", NULL});
    expect_clean("outboxctl status", r.out);
    ctl_run_fini(&r);
    ctl_run(&r, &renv, (const char *const[]){"doctor", "--json", NULL});
    expect_clean("outboxctl doctor", r.out);
    ctl_run_fini(&r);
    ctl_run(&r, &renv, (const char *const[]){"audit", NULL});
    expect_clean("outboxctl audit", r.out);
    ctl_run_fini(&r);

    /* Errors: the database refuses a wrong password, NATS a wrong token. */
    bad_file = secret_file("bad-token", "x" NATS_TOKEN "\n");
    relay_env_set(&renv, "OUTBOX_NATS_TOKEN_FILE", bad_file);
    ctl_run(&r, &renv, (const char *const[]){"doctor", NULL});
    cr_assert(strstr(r.out, "credentials refused") != NULL, "%s", r.out);
    expect_clean("outboxctl doctor with a wrong token", r.out);
    ctl_run_fini(&r);
    remove(url_file);
    free(url_file);
    relay_env_fini(&renv);
    url_file = url_file_env(&renv, "PG_SECRETS", "x" PG_PASSWORD, "ca.pem");
    ctl_run(&r, &renv, (const char *const[]){"status", NULL});
    cr_assert_neq(r.status, 0, "%s", r.out);
    cr_assert(strstr(r.out, "password authentication failed") != NULL, "%s", r.out);
    expect_clean("outboxctl status with a wrong password", r.out);
    ctl_run_fini(&r);

    consume_test_stop(&consumer, 10000);
    relay_test_stop(&relay, 10000);
    text = harness_proc_log(&relay);
    expect_clean("the relay's log", text);
    free(text);
    text = harness_proc_log(&consumer);
    expect_clean("the consumer's log", text);
    free(text);
    relay_env_fini(&cenv);
    relay_env_fini(&renv);
    remove(url_file);
    remove(token_file);
    remove(bad_file);
    free(url_file);
    free(token_file);
    free(bad_file);
    trust_nats_stop(&n);
}
