/* SPDX-License-Identifier: MIT */
/*
 * test_nats_auth.c - every way the daemons sign in to NATS, each against a
 * real nats-server that requires it: a user and password in the URL and as
 * settings (OUTBOX_NATS_USER, OUTBOX_NATS_PASSWORD_FILE), a token in the URL
 * and as a file (OUTBOX_NATS_TOKEN_FILE), an NKey seed file
 * (OUTBOX_NATS_NKEY_SEED) and a .creds file (OUTBOX_NATS_CREDS) against an
 * operator-mode server with a memory resolver. Keys and JWTs are minted
 * offline (tests/scripts/mint_nats_keys.py). Wrong credentials of each kind
 * leave the relay running and retrying at growing intervals, publishing
 * nothing, with an error that names the setting that was refused and never
 * the secret; outboxctl exits 1 with the same words.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "ctl_test.h"
#include "harness.h"
#include "relay_test.h"
#include "trust_test.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define PASSWORD "nats-pw-5Zr8-secret"
#define TOKEN    "nats-token-Qm3v-secret"

static PGconn *conn;

static void
setup(void)
{
    conn = harness_pg_connect_fresh();
    relay_test_prepare(conn);
}

static void
teardown(void)
{
    PQfinish(conn);
    conn = NULL;
}

TestSuite(nats_auth, .init = setup, .fini = teardown, .timeout = 180);

/* A server with a password user and an NKey user. */
static void
users_server(struct trust_nats *n)
{
    char body[1024];
    char *pub = trust_read("nkey.pub");

    snprintf(body, sizeof(body),
             "authorization { users: [ { user: relay, password: \"%s\" }, { nkey: %s } ] }",
             PASSWORD, pub);
    free(pub);
    trust_nats_start(n, body);
}

static void
operator_server(struct trust_nats *n)
{
    char body[8192];
    char *account = trust_read("account.pub"), *system = trust_read("system.pub");
    char *account_jwt = trust_read("account.jwt"), *system_jwt = trust_read("system.jwt");

    snprintf(body, sizeof(body),
             "operator: \"%s\"\nsystem_account: %s\nresolver: MEMORY\n"
             "resolver_preload: { %s: \"%s\", %s: \"%s\" }",
             trust_file("operator.jwt"), system, account, account_jwt, system, system_jwt);
    free(account);
    free(system);
    free(account_jwt);
    free(system_jwt);
    trust_nats_start(n, body);
}

/* Settings for `stream` at `url`. */
static void
auth_env(struct relay_env *env, const char *stream, const char *url)
{
    char prefix[40];

    snprintf(prefix, sizeof(prefix), "%s", stream);
    for (char *p = prefix; *p != '\0'; p++) {
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p == '_' ? 'x' : *p);
    }
    relay_test_env(env, stream, prefix);
    relay_env_set(env, "OUTBOX_NATS_URL", url);
}

/* A relay with `env` publishes 20 events, and outboxctl audit agrees. */
static void
expect_publishes(struct relay_env *env, const char *name)
{
    struct harness_proc relay;
    struct ctl_run r;

    relay_test_start(&relay, env, name);
    relay_test_enqueue(conn, 20);
    HARNESS_WAIT_UNTIL(relay_test_unfinished(conn) == 0, 30000);
    ctl_expect(&r, env, 0, (const char *const[]){"audit", NULL});
    ctl_run_fini(&r);
    relay_test_stop(&relay, 10000);
    cr_assert(!harness_proc_log_contains(&relay, PASSWORD) &&
              !harness_proc_log_contains(&relay, TOKEN));
}

/* URL "nats://<userinfo>@127.0.0.1:port" of a server. */
static void
url_with(char *out, size_t cap, const char *userinfo, const struct trust_nats *n)
{
    snprintf(out, cap, "nats://%s@127.0.0.1:%d", userinfo, n->port);
}

Test(nats_auth, user_and_password_in_the_url_and_as_settings)
{
    struct trust_nats n;
    struct relay_env env;
    char url[160], *file;

    users_server(&n);
    url_with(url, sizeof(url), "relay:" PASSWORD, &n);
    auth_env(&env, "AUTH_URL", url);
    expect_publishes(&env, "relay-url-password");
    relay_env_fini(&env);

    file = trust_nats_write(&n, "password", PASSWORD "\n");
    auth_env(&env, "AUTH_URL", n.url);
    relay_env_set(&env, "OUTBOX_NATS_USER", "relay");
    relay_env_set(&env, "OUTBOX_NATS_PASSWORD_FILE", file);
    expect_publishes(&env, "relay-password-file");
    relay_env_fini(&env);
    free(file);
    trust_nats_stop(&n);
}

Test(nats_auth, an_nkey_seed_file)
{
    struct trust_nats n;
    struct relay_env env;

    users_server(&n);
    auth_env(&env, "AUTH_NKEY", n.url);
    relay_env_set(&env, "OUTBOX_NATS_NKEY_SEED", trust_file("nkey.seed"));
    expect_publishes(&env, "relay-nkey");
    relay_env_fini(&env);
    trust_nats_stop(&n);
}

Test(nats_auth, a_token_in_the_url_and_as_a_file)
{
    struct trust_nats n;
    struct relay_env env;
    char url[160], *file;

    trust_nats_start(&n, "authorization { token: \"" TOKEN "\" }");
    url_with(url, sizeof(url), TOKEN, &n);
    auth_env(&env, "AUTH_TOKEN_URL", url);
    expect_publishes(&env, "relay-token-url");
    relay_env_fini(&env);

    file = trust_nats_write(&n, "token", TOKEN "\n");
    auth_env(&env, "AUTH_TOKEN_URL", n.url);
    relay_env_set(&env, "OUTBOX_NATS_TOKEN_FILE", file);
    expect_publishes(&env, "relay-token-file");
    relay_env_fini(&env);
    free(file);
    trust_nats_stop(&n);
}

Test(nats_auth, a_creds_file_against_an_operator_with_a_memory_resolver)
{
    struct trust_nats n;
    struct relay_env env;

    operator_server(&n);
    auth_env(&env, "AUTH_CREDS", n.url);
    relay_env_set(&env, "OUTBOX_NATS_CREDS", trust_file("user.creds"));
    expect_publishes(&env, "relay-creds");
    relay_env_fini(&env);
    trust_nats_stop(&n);
}

/* Sign-ins by connection `name` that server `n` refused so far (it logs each). */
static int
refusals(const struct trust_nats *n, const char *name)
{
    char *log = harness_proc_log(&n->proc);
    int count = 0;

    for (char *line = log; line != NULL && *line != '\0';) {
        char *end = strchr(line, '\n');

        if (end != NULL) {
            *end = '\0';
        }
        count += strstr(line, name) != NULL && strstr(line, "authentication error") != NULL;
        line = end != NULL ? end + 1 : NULL;
    }
    free(log);
    return count;
}

/* A relay that must be refused, started with `env` and checked by expect_refused(). */
struct refused {
    const struct trust_nats *server;
    struct relay_env env;
    struct harness_proc relay;
    const char *name, *setting, *secret;
    int early;
};

static void
start_refused(struct refused *r)
{
    relay_test_start(&r->relay, &r->env, r->name);
    HARNESS_WAIT_UNTIL(harness_proc_log_contains(&r->relay, "credentials refused"), 30000);
    r->early = refusals(r->server, r->name);
}

/*
 * The relay kept running and tried again at growing intervals (the server
 * saw each try), published nothing, named the setting and never the
 * secret; outboxctl audit exits 1 saying the same.
 */
static void
expect_refused(struct refused *r, int waited_ms)
{
    struct ctl_run run;
    int late = refusals(r->server, r->name);
    char *log = harness_proc_log(&r->relay);

    relay_test_assert_running(&r->relay, r->name);
    cr_log_info("%s: %d refused at first, %d after %d ms:\n%s", r->name, r->early, late, waited_ms,
                log);
    cr_assert(late > r->early, "the relay did not try again:\n%s", log);
    cr_assert(late <= 2 + waited_ms / 1000, "the relay tried %d times: no backoff\n%s", late, log);
    cr_assert(strstr(log, r->setting) != NULL, "the error does not name %s:\n%s", r->setting, log);
    cr_assert(r->secret == NULL || strstr(log, r->secret) == NULL, "the log shows the secret:\n%s",
              log);
    cr_assert(strstr(log, "nats connected") == NULL, "%s", log);
    free(log);
    relay_test_stop(&r->relay, 10000);

    ctl_run(&run, &r->env, (const char *const[]){"audit", NULL});
    cr_assert_eq(run.status, 1, "outboxctl audit exited %d:\n%s", run.status, run.out);
    cr_assert(strstr(run.out, r->setting) != NULL && strstr(run.out, "credentials refused") != NULL,
              "%s", run.out);
    cr_assert(r->secret == NULL || strstr(run.out, r->secret) == NULL, "%s", run.out);
    ctl_run_fini(&run);
    relay_env_fini(&r->env);
}

Test(nats_auth, wrong_credentials_are_refused_retried_and_named)
{
    struct trust_nats users, op;
    struct refused r[3] = {
        {.server = &users,
         .name = "relay-wrong-password",
         .setting = "OUTBOX_NATS_PASSWORD_FILE=",
         .secret = "not-" PASSWORD},
        {.server = &users, .name = "relay-wrong-nkey", .setting = "OUTBOX_NATS_NKEY_SEED="},
        {.server = &op, .name = "relay-wrong-creds", .setting = "OUTBOX_NATS_CREDS="},
    };
    long long before;
    char *file;

    users_server(&users);
    operator_server(&op);
    relay_test_enqueue(conn, 10);
    before = relay_test_unfinished(conn);
    file = trust_nats_write(&users, "wrong-password", "not-" PASSWORD "\n");
    auth_env(&r[0].env, "AUTH_WRONG", users.url);
    relay_env_set(&r[0].env, "OUTBOX_NATS_USER", "relay");
    relay_env_set(&r[0].env, "OUTBOX_NATS_PASSWORD_FILE", file);
    auth_env(&r[1].env, "AUTH_WRONG", users.url);
    relay_env_set(&r[1].env, "OUTBOX_NATS_NKEY_SEED", trust_file("wrong-nkey.seed"));
    auth_env(&r[2].env, "AUTH_WRONG", op.url);
    relay_env_set(&r[2].env, "OUTBOX_NATS_CREDS", trust_file("wrong.creds"));
    for (int i = 0; i < 3; i++) {
        start_refused(&r[i]);
    }
    harness_sleep_ms(6000);
    cr_assert_eq(relay_test_unfinished(conn), before, "rows were published past refused sign-ins");
    for (int i = 0; i < 3; i++) {
        expect_refused(&r[i], 6000);
    }
    free(file);
    trust_nats_stop(&op);
    trust_nats_stop(&users);
}
