/* SPDX-License-Identifier: MIT */
/*
 * test_nats_tls.c - NATS over TLS against a real nats-server with a tls {}
 * block and certificates made by openssl (tests/scripts/make_tls_material.sh):
 * the relay, a consumer and outboxctl verify the server by
 * OUTBOX_NATS_TLS_CA and present a client certificate when the server
 * asks for one (verify: true); a wrong CA, an expired server certificate
 * or a missing client certificate is refused with an error naming the
 * setting; and nothing ever falls back to plaintext: a tls:// URL or a CA
 * against a plaintext server fails, and a capture of every byte the relay
 * sends shows no event.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "consume_test.h"
#include "ctl_test.h"
#include "harness.h"
#include "relay_test.h"
#include "trust_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* An event type that shows in the subject and the envelope: found in a capture if sent in clear. */
#define MARKER "plaintextprobe"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    consume_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(nats_tls, .init = setup, .fini = teardown, .timeout = 180);

/* A TLS server with `cert` (server.pem, expired.pem); `verify`: client certificates required. */
static void
tls_server(struct trust_nats *n, const char *cert, int verify)
{
    char body[2048], crt[600], key[600], ca[600];

    snprintf(crt, sizeof(crt), "%s", trust_file(cert));
    snprintf(key, sizeof(key), "%.*s-key.pem", (int)(strlen(crt) - 4), crt);
    snprintf(ca, sizeof(ca), "%s", trust_file("ca.pem"));
    snprintf(body, sizeof(body), "tls { cert_file: \"%s\"\nkey_file: \"%s\"\nca_file: \"%s\"\n%s}",
             crt, key, ca, verify ? "verify: true\n" : "");
    trust_nats_start(n, body);
}

/* Relay settings for stream `stream` at `url`, verifying the server with `ca` (NULL: none). */
static void
tls_env(struct relay_env *env, const char *stream, const char *url, const char *ca)
{
    char prefix[40];

    snprintf(prefix, sizeof(prefix), "%s", stream);
    for (char *p = prefix; *p != '\0'; p++) {
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p == '_' ? 'x' : *p);
    }
    relay_test_env(env, stream, prefix);
    relay_env_set(env, "OUTBOX_NATS_URL", url);
    if (ca != NULL) {
        relay_env_set(env, "OUTBOX_NATS_TLS_CA", trust_file(ca));
    }
}

static void
client_cert(struct relay_env *env)
{
    relay_env_set(env, "OUTBOX_NATS_TLS_CERT", trust_file("client.pem"));
    relay_env_set(env, "OUTBOX_NATS_TLS_KEY", trust_file("client-key.pem"));
}

static void
enqueue_marked(int n)
{
    relay_test_enqueue_sized(conn, n, MARKER, 16);
}

Test(nats_tls, relay_consumer_and_outboxctl_verify_the_server_and_send_nothing_in_clear)
{
    static const char *const handlers[] = {CONSUME_EFFECT("effect"), NULL};
    struct trust_nats n;
    struct harness_proxy px;
    struct relay_env renv, cenv;
    struct harness_proc relay, consumer;
    struct ctl_run r;
    char url[96], dump[500];

    tls_server(&n, "server.pem", 0);
    /* The relay goes through a proxy that keeps every byte it sends. */
    snprintf(dump, sizeof(dump), "%s/relay-sent.bin", n.dir);
    snprintf(url, sizeof(url), "tls://127.0.0.1:%d",
             harness_proxy_start_dumping(&px, n.port, dump));
    tls_env(&renv, "TLS_ALL", url, "ca.pem");
    consume_test_env(&cenv, "jetstream", "TLS_ALL", "tlsxall", "G_TLS");
    relay_env_set(&cenv, "OUTBOX_NATS_URL", n.url);
    relay_env_set(&cenv, "OUTBOX_NATS_TLS_CA", trust_file("ca.pem"));
    relay_test_start(&relay, &renv, "relay-tls");
    consume_test_start(&consumer, &cenv, "consumer-tls", handlers);
    enqueue_marked(100);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    HARNESS_WAIT_UNTIL(consume_test_handled(conn, "effect") == 100, 30000);
    consume_test_expect_exactly_once(conn, "effect");

    /* outboxctl reads the stream back over TLS: every event is there once. */
    relay_env_set(&renv, "OUTBOX_NATS_URL", n.url);
    ctl_expect(&r, &renv, 0, (const char *const[]){"audit", "--json", NULL});
    ctl_run_fini(&r);

    cr_assert(trust_file_contains(dump, "\x16\x03"), "no TLS record in what the relay sent");
    cr_assert(!trust_file_contains(dump, MARKER) && !trust_file_contains(dump, "movie"),
              "an event crossed in clear (%s)", dump);
    consume_test_stop(&consumer, 10000);
    relay_test_stop(&relay, 10000);
    harness_proxy_stop(&px);
    relay_env_fini(&cenv);
    relay_env_fini(&renv);
    trust_nats_stop(&n);
}

Test(nats_tls, mutual_tls_needs_the_client_certificate)
{
    struct trust_nats n;
    struct relay_env env;
    struct harness_proc relay;
    struct ctl_run r;

    tls_server(&n, "server.pem", 1);
    tls_env(&env, "TLS_MUTUAL", n.url, "ca.pem");
    /* Without a client certificate the server ends the handshake. */
    ctl_run(&r, &env, (const char *const[]){"audit", NULL});
    cr_assert_neq(r.status, 0, "audit passed without a client certificate:\n%s", r.out);
    cr_assert(strstr(r.out, "OUTBOX_NATS_TLS_CA") != NULL, "the error names no setting:\n%s",
              r.out);
    ctl_run_fini(&r);

    client_cert(&env);
    relay_test_start(&relay, &env, "relay-mtls");
    enqueue_marked(50);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    ctl_expect(&r, &env, 0, (const char *const[]){"audit", NULL});
    ctl_run_fini(&r);
    relay_test_stop(&relay, 10000);
    relay_env_fini(&env);
    trust_nats_stop(&n);
}

/* A relay that must not connect: it keeps running, publishes nothing, and says why. */
static void
expect_refused(struct relay_env *env, const char *name, const char *const words[])
{
    struct harness_proc relay;
    char *log;

    relay_test_start(&relay, env, name);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&relay, "tls refused"), 30000);
    harness_sleep_ms(1000);
    relay_test_assert_running(&relay, name);
    log = harness_proc_log(&relay);
    for (int i = 0; words[i] != NULL; i++) {
        cr_assert(strstr(log, words[i]) != NULL, "the refusal does not say %s:\n%s", words[i], log);
    }
    cr_assert(strstr(log, "nats connected") == NULL, "connected anyway:\n%s", log);
    free(log);
    relay_test_stop(&relay, 10000);
}

Test(nats_tls, a_wrong_ca_or_an_expired_certificate_is_refused_naming_the_setting)
{
    struct trust_nats good, expired;
    struct relay_env env;
    long long before;

    tls_server(&good, "server.pem", 0);
    tls_server(&expired, "expired.pem", 0);
    enqueue_marked(20);
    before = relay_test_unfinished(conn);

    tls_env(&env, "TLS_WRONG_CA", good.url, "other-ca.pem");
    expect_refused(&env, "relay-wrong-ca",
                   (const char *const[]){"OUTBOX_NATS_TLS_CA=", "other-ca.pem", NULL});
    relay_env_fini(&env);

    tls_env(&env, "TLS_EXPIRED", expired.url, "ca.pem");
    expect_refused(&env, "relay-expired", (const char *const[]){"OUTBOX_NATS_TLS_CA=", NULL});
    relay_env_fini(&env);
    cr_assert_eq(relay_test_unfinished(conn), before, "rows were published past a refused TLS");
    trust_nats_stop(&expired);
    trust_nats_stop(&good);
}

Test(nats_tls, tls_wanted_against_a_plaintext_server_never_falls_back)
{
    struct harness_proxy px;
    struct relay_env env;
    struct harness_proc relay;
    struct ctl_run r;
    char url[96], dump[500];

    /* The run's server speaks plaintext. */
    snprintf(dump, sizeof(dump), "%s/trust-plain-%d.bin", hx_run_dir(), (int)getpid());
    snprintf(url, sizeof(url), "nats://127.0.0.1:%d",
             harness_proxy_start_dumping(&px, harness_nats_port(), dump));
    enqueue_marked(20);

    /* A CA with a nats:// URL: TLS is still required. */
    tls_env(&env, "TLS_PLAIN", url, "ca.pem");
    relay_test_start(&relay, &env, "relay-plain");
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&relay, "tls refused") ||
                           harness_proc_wait(&relay, 0) != -1,
                       30000);
    harness_sleep_ms(1000);
    harness_proc_stop(&relay, 10000);
    cr_assert(harness_proc_log_contains(&relay, "OUTBOX_NATS_TLS_CA="), "%s",
              harness_proc_log(&relay));
    cr_assert(!harness_proc_log_contains(&relay, "nats connected"), "%s", harness_proc_log(&relay));
    cr_assert_eq(relay_test_unfinished(conn), 20, "rows were published in clear");
    cr_assert(!trust_file_contains(dump, MARKER) && !trust_file_contains(dump, "CONNECT"),
              "the relay spoke plaintext to the server");
    harness_proxy_stop(&px);
    remove(dump);
    relay_env_fini(&env);

    /* A tls:// URL alone (system trust store) refuses the same server. */
    tls_env(&env, "TLS_PLAIN", harness_nats_url(), NULL);
    snprintf(url, sizeof(url), "tls://%s", strstr(harness_nats_url(), "127.0.0.1"));
    relay_env_set(&env, "OUTBOX_NATS_URL", url);
    ctl_run(&r, &env, (const char *const[]){"audit", NULL});
    cr_assert_neq(r.status, 0, "audit read a plaintext server through tls://:\n%s", r.out);
    cr_assert(strstr(r.out, "tls refused") != NULL, "%s", r.out);
    ctl_run_fini(&r);
    relay_env_fini(&env);
}

/*
 * outbox-bench consume over mutual TLS: its own connections (stream setup,
 * the raw fetch baseline) and its consumer workers take the same settings.
 */
Test(nats_tls, the_benchmark_takes_the_same_tls_settings)
{
    char *argv[] = {(char *)harness_bin("outbox-bench"),
                    "consume",
                    "--events",
                    "100",
                    "--seconds",
                    "0.3",
                    "--batch",
                    "100",
                    NULL};
    struct trust_nats n;
    struct relay_env env;
    struct harness_proc p;
    char *out;

    tls_server(&n, "server.pem", 1);
    tls_env(&env, "TLS_BENCH", n.url, "ca.pem");
    client_cert(&env);
    harness_spawn(&p, argv, env.vars);
    cr_assert_eq(harness_proc_wait(&p, 120000), 0, "outbox-bench consume failed over TLS:\n%s",
                 harness_proc_log(&p));
    out = harness_proc_log(&p);
    cr_assert(strstr(out, "raw_fetch_ack") != NULL && strstr(out, "consume_jetstream") != NULL,
              "%s", out);
    cr_assert(strstr(out, "throwaway nats") == NULL, "the bench started its own server:\n%s", out);
    free(out);
    relay_env_fini(&env);
    trust_nats_stop(&n);
}

/* Runs outbox-bench with `args` against the mutual-TLS server of `env`; its log (free it). */
static char *
bench_over_tls(struct relay_env *env, const char *const args[])
{
    char *argv[16] = {(char *)harness_bin("outbox-bench")};
    struct harness_proc p;
    char *out;
    int i;

    for (i = 0; args[i] != NULL && i < 14; i++) {
        argv[i + 1] = (char *)args[i];
    }
    argv[i + 1] = NULL;
    harness_spawn(&p, argv, env->vars);
    cr_assert_eq(harness_proc_wait(&p, 170000), 0, "outbox-bench %s failed over TLS:\n%s", args[0],
                 harness_proc_log(&p));
    out = harness_proc_log(&p);
    cr_assert(strstr(out, "throwaway nats") == NULL, "the bench started its own server:\n%s", out);
    cr_assert(strstr(out, "cannot subscribe") == NULL, "%s", out);
    return out;
}

/*
 * outbox-bench relay's latency and sustained cases over mutual TLS: their
 * subscribers (the sustained case's ack watch connected without TLS or
 * credentials) and relay workers take the same settings.
 */
Test(nats_tls, the_relay_benchmark_cases_take_the_same_tls_settings, .timeout = 400)
{
    struct trust_nats n;
    struct relay_env env;
    char *out;

    tls_server(&n, "server.pem", 1);
    tls_env(&env, "TLS_BENCH_RELAY", n.url, "ca.pem");
    client_cert(&env);
    out = bench_over_tls(&env, (const char *const[]){"relay", "--case", "latency", "--seconds",
                                                     "0.3", "--batch", "100", NULL});
    cr_assert(strstr(out, "\"latency\"") != NULL, "%s", out);
    free(out);
    out = bench_over_tls(&env,
                         (const char *const[]){"relay", "--case", "sustained", "--sustain-seconds",
                                               "1", "--seconds", "0.3", NULL});
    cr_assert(strstr(out, "\"sustained\"") != NULL, "%s", out);
    free(out);
    relay_env_fini(&env);
    trust_nats_stop(&n);
}

/* outbox-bench fleet over mutual TLS: the fleet relay it runs (no TLS settings before) too. */
Test(nats_tls, the_fleet_benchmark_takes_the_same_tls_settings, .timeout = 400)
{
    struct trust_nats n;
    struct relay_env env;
    char *out;

    tls_server(&n, "server.pem", 1);
    tls_env(&env, "TLS_BENCH_FLEET", n.url, "ca.pem");
    client_cert(&env);
    out = bench_over_tls(&env, (const char *const[]){"fleet", "--events", "2000", NULL});
    cr_assert(strstr(out, "\"fleet\"") != NULL && strstr(out, "\"ten_plain_relays\"") != NULL, "%s",
              out);
    free(out);
    relay_env_fini(&env);
    trust_nats_stop(&n);
}

/*
 * The fleet relay over mutual TLS: its database's relay connects with the
 * replica's TLS settings, and every event reaches the stream (outboxctl
 * audit, over TLS too, finds them all).
 */
Test(nats_tls, the_fleet_relay_publishes_over_mutual_tls)
{
    struct trust_nats n;
    struct relay_env env, audit;
    struct harness_proc relay;
    struct ctl_run r;
    char fleet_path[64];
    FILE *f;

    tls_server(&n, "server.pem", 1);
    snprintf(fleet_path, sizeof(fleet_path), "/tmp/obx-tls-fleet-%d.conf", (int)getpid());
    f = fopen(fleet_path, "w");
    cr_assert_not_null(f);
    fprintf(f, "only %s schema=outbox stream=TLS_FLEET subject_prefix=tlsxfleet\n",
            harness_db_url());
    fclose(f);
    tls_env(&env, "TLS_FLEET_BASE", n.url, "ca.pem");
    client_cert(&env);
    relay_env_set(&env, "OUTBOX_FLEET_FILE", fleet_path);
    relay_env_set(&env, "OUTBOX_FLEET_TRY_MS", "300");
    relay_test_start(&relay, &env, "fleet-tls");
    enqueue_marked(30);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);

    tls_env(&audit, "TLS_FLEET", n.url, "ca.pem");
    client_cert(&audit);
    ctl_expect(&r, &audit, 0, (const char *const[]){"audit", "--json", NULL});
    ctl_run_fini(&r);
    unlink(fleet_path);
    relay_env_fini(&audit);
    relay_env_fini(&env);
    trust_nats_stop(&n);
}

/*
 * outboxctl replay over mutual TLS: the rows a relay published go again,
 * into a second stream that replay creates, and all of them arrive there.
 */
Test(nats_tls, outboxctl_replay_publishes_over_mutual_tls)
{
    struct trust_nats n;
    struct relay_env env, again;
    struct harness_proc relay;
    struct ctl_run r;

    tls_server(&n, "server.pem", 1);
    tls_env(&env, "TLS_REPLAY", n.url, "ca.pem");
    client_cert(&env);
    relay_test_start(&relay, &env, "relay-replay-tls");
    enqueue_marked(25);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    relay_test_stop(&relay, 10000);

    tls_env(&again, "TLS_REPLAY_B", n.url, "ca.pem");
    client_cert(&again);
    ctl_expect(&r, &again, 0, (const char *const[]){"replay", "--json", NULL});
    cr_assert_eq(ctl_int(ctl_line(&r, "summary", 0), "published"), 25, "%s", r.out);
    ctl_run_fini(&r);
    ctl_expect(&r, &again, 0, (const char *const[]){"audit", "--json", NULL});
    ctl_run_fini(&r);
    relay_env_fini(&again);
    relay_env_fini(&env);
    trust_nats_stop(&n);
}
