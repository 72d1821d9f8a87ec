/* SPDX-License-Identifier: MIT */
/*
 * test_stream_nats.c - stream setup against a real nats-server: a missing
 * stream is created exactly as asked, an existing one gets only its
 * duplicate window changed (every other field kept), and what cannot be
 * changed is logged with the command that would, without failing.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>
#include <nats/nats.h>

#include "bus/bus.h"
#include "bus/stream.h"
#include "harness.h"
#include "outbox/worker.h"

#include "common/banned.h" /* last: poisons unsafe functions */

#define NS_PER_S INT64_C(1000000000)

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];
static size_t log_len;

static void
capture(void *ctx, outbox_log_level level, const char *line)
{
    (void)ctx;
    pthread_mutex_lock(&log_mu);
    log_len += (size_t)snprintf(log_text + log_len, sizeof(log_text) - log_len, "%d %s\n",
                                (int)level, line);
    if (log_len >= sizeof(log_text)) {
        log_len = sizeof(log_text) - 1;
    }
    pthread_mutex_unlock(&log_mu);
}

static int
logged(const char *needle)
{
    int found;

    pthread_mutex_lock(&log_mu);
    found = strstr(log_text, needle) != NULL;
    pthread_mutex_unlock(&log_mu);
    return found;
}

static natsConnection *nc;
static jsCtx *js;
static struct obx_bus *bus;

static void
setup(void)
{
    struct obx_bus_options o;
    outbox_error err = {0};

    outbox_set_logger(capture, NULL, OUTBOX_LOG_DEBUG);
    cr_assert_eq(natsConnection_ConnectTo(&nc, harness_nats_url()), NATS_OK);
    cr_assert_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    obx_bus_options_init(&o);
    o.url = harness_nats_url();
    cr_assert_eq(obx_bus_open(&o, &bus, &err), OUTBOX_OK, "%s", err.message);
}

static void
setup_exclusive(void)
{
    harness_servers_exclusive();
    setup();
}

static void
teardown(void)
{
    obx_bus_close(bus);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* Options for stream `name` on `prefix`.>, after deleting any stream of that name. */
static struct obx_stream_options
fresh(const char *name, const char *prefix)
{
    struct obx_stream_options o;

    js_DeleteStream(js, name, NULL, NULL); /* a server from outside may keep old ones */
    obx_stream_options_init(&o);
    o.name = name;
    o.subjects_prefix = prefix;
    return o;
}

static jsStreamInfo *
info(const char *name)
{
    jsStreamInfo *si = NULL;
    jsErrCode code = 0;

    cr_assert_eq(js_GetStreamInfo(&si, js, name, NULL, &code), NATS_OK, "stream %s: %d", name,
                 (int)code);
    return si;
}

/* A stream made by someone else: custom fields we must not touch. */
static void
add_custom(const char *name, const char *subject, int64_t dupe_s, int64_t max_age_s)
{
    const char *subjects[] = {subject};
    jsStreamConfig cfg;
    jsErrCode code = 0;

    jsStreamConfig_Init(&cfg);
    cfg.Name = name;
    cfg.Description = "made by hand";
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_MemoryStorage;
    cfg.MaxMsgs = 12345;
    cfg.MaxMsgsPerSubject = 7;
    cfg.MaxMsgSize = 65536;
    cfg.AllowRollup = true;
    cfg.MaxAge = max_age_s * NS_PER_S;
    cfg.Duplicates = dupe_s * NS_PER_S;
    cr_assert_eq(js_AddStream(NULL, js, &cfg, NULL, &code), NATS_OK, "add %s: %d", name, (int)code);
}

static void
ensure_ok(const struct obx_stream_options *o)
{
    outbox_error err = {0};

    cr_assert_eq(obx_stream_ensure(bus, o, &err), OUTBOX_OK, "%s", err.message);
}

TestSuite(stream, .init = setup, .fini = teardown, .timeout = 120);

Test(stream, creates_a_missing_stream_with_exactly_the_settings_asked_for)
{
    struct obx_stream_options o = fresh("ST_NEW", "stnew");
    jsStreamInfo *si;
    jsStreamConfig *c;

    o.max_age_seconds = 2 * 86400;
    o.max_bytes = 1 << 30;
    o.duplicate_window_seconds = 1800;
    ensure_ok(&o);
    si = info("ST_NEW");
    c = si->Config;
    cr_assert_eq(c->SubjectsLen, 1);
    cr_assert_str_eq(c->Subjects[0], "stnew.>");
    cr_assert_eq(c->Storage, js_FileStorage);
    cr_assert_eq(c->Retention, js_LimitsPolicy);
    cr_assert_eq(c->Duplicates, 1800 * NS_PER_S);
    cr_assert_eq(c->MaxAge, 2 * 86400 * NS_PER_S);
    cr_assert_eq(c->MaxBytes, 1 << 30);
    cr_assert_eq(c->Replicas, 1);
    cr_assert(c->DenyDelete, "deny_delete");
    cr_assert(c->DenyPurge, "deny_purge");
    jsStreamInfo_Destroy(si);
    cr_assert(logged("stream created stream=ST_NEW subjects=stnew.>"), "%s", log_text);
}

Test(stream, uses_the_design_defaults)
{
    struct obx_stream_options o = fresh("ST_DEF", "stdef");
    jsStreamInfo *si;

    ensure_ok(&o);
    si = info("ST_DEF");
    cr_assert_eq(si->Config->Duplicates, 3600 * NS_PER_S);
    cr_assert_eq(si->Config->MaxAge, 7 * 86400 * NS_PER_S);
    cr_assert_eq(si->Config->MaxBytes, -1);
    jsStreamInfo_Destroy(si);
}

Test(stream, leaves_a_stream_that_already_matches_untouched)
{
    struct obx_stream_options o = fresh("ST_SAME", "stsame");

    ensure_ok(&o);
    log_len = 0;
    log_text[0] = '\0';
    ensure_ok(&o);
    cr_assert(!logged("stream created") && !logged("stream updated") && !logged("differ"), "%s",
              log_text);
}

Test(stream, changes_only_the_duplicate_window_of_an_existing_stream)
{
    struct obx_stream_options o = fresh("ST_OLD", "stold");
    jsStreamInfo *si;
    jsStreamConfig *c;

    add_custom("ST_OLD", "stold.>", 120, 2 * 86400);
    ensure_ok(&o);
    si = info("ST_OLD");
    c = si->Config;
    cr_assert_eq(c->Duplicates, 3600 * NS_PER_S, "the one field we own");
    cr_assert_str_eq(c->Description, "made by hand");
    cr_assert_eq(c->Storage, js_MemoryStorage);
    cr_assert_eq(c->MaxMsgs, 12345);
    cr_assert_eq(c->MaxMsgsPerSubject, 7);
    cr_assert_eq(c->MaxMsgSize, 65536);
    cr_assert(c->AllowRollup);
    cr_assert_eq(c->MaxAge, 2 * 86400 * NS_PER_S, "not our 7 days");
    cr_assert(!c->DenyDelete && !c->DenyPurge, "not ours to change");
    jsStreamInfo_Destroy(si);
    cr_assert(logged("stream updated stream=ST_OLD field=duplicate_window from=2m to=1h"), "%s",
              log_text);
}

Test(stream, warns_with_the_fix_and_keeps_running_when_the_server_refuses_the_window)
{
    struct obx_stream_options o = fresh("ST_REFUSE", "strefuse");
    jsStreamInfo *si;

    /* A duplicate window longer than max_age is refused by the server. */
    add_custom("ST_REFUSE", "strefuse.>", 120, 600);
    ensure_ok(&o);
    si = info("ST_REFUSE");
    cr_assert_eq(si->Config->Duplicates, 120 * NS_PER_S, "unchanged");
    jsStreamInfo_Destroy(si);
    cr_assert(logged("2 stream settings differ and could not be updated stream=ST_REFUSE "
                     "field=duplicate_window want=1h have=2m"),
              "%s", log_text);
    cr_assert(logged("fix=\"nats stream edit ST_REFUSE --dupe-window 1h\""), "%s", log_text);
}

Test(stream, warns_when_the_stream_does_not_capture_the_prefix)
{
    struct obx_stream_options o = fresh("ST_SUBJ", "stsubj");

    add_custom("ST_SUBJ", "stelse.>", 3600, 86400);
    ensure_ok(&o);
    cr_assert(logged("stream subjects do not capture the prefix stream=ST_SUBJ want=stsubj.> "
                     "have=\"stelse.>\""),
              "%s", log_text);
}

Test(stream, accepts_a_wildcard_subject_that_captures_the_prefix)
{
    struct obx_stream_options o = fresh("ST_WILD", "stwild.a");

    add_custom("ST_WILD", "stwild.*.>", 3600, 86400);
    ensure_ok(&o);
    cr_assert(!logged("do not capture"), "%s", log_text);
}

Test(stream, refuses_to_create_a_stream_whose_subjects_another_stream_owns)
{
    struct obx_stream_options o = fresh("ST_SECOND", "stown");
    outbox_error err = {0};

    add_custom("ST_OWNER", "stown.>", 3600, 86400);
    cr_assert_eq(obx_stream_ensure(bus, &o, &err), OUTBOX_EINVAL, "%s", err.message);
    cr_assert(strstr(err.message, "overlap") != NULL, "%s", err.message);
    js_DeleteStream(js, "ST_OWNER", NULL, NULL);
}

Test(stream, refuses_bad_options)
{
    struct obx_stream_options o = fresh("ST_BAD", "stbad");

    o.name = "has space";
    cr_assert_eq(obx_stream_ensure(bus, &o, NULL), OUTBOX_EINVAL);
    o = fresh("ST_BAD", "st*bad");
    cr_assert_eq(obx_stream_ensure(bus, &o, NULL), OUTBOX_EINVAL);
    o = fresh("ST_BAD", "stbad");
    o.duplicate_window_seconds = 0;
    cr_assert_eq(obx_stream_ensure(bus, &o, NULL), OUTBOX_EINVAL);
}

TestSuite(stream_without_nats, .init = setup_exclusive, .fini = teardown, .timeout = 120);

Test(stream_without_nats, is_unavailable_while_the_server_is_down)
{
    struct obx_stream_options o = fresh("ST_DOWN", "stdown");
    outbox_error err = {0};

    harness_nats_kill(SIGKILL);
    HARNESS_WAIT_UNTIL(!obx_bus_is_connected(bus), 5000);
    cr_assert_eq(obx_stream_ensure(bus, &o, &err), OUTBOX_EUNAVAILABLE, "%s", err.message);
    harness_nats_start();
    HARNESS_WAIT_UNTIL(obx_bus_is_connected(bus), 20000);
    ensure_ok(&o);
}

Test(stream_without_nats, is_unavailable_while_the_server_hangs)
{
    struct obx_stream_options o = fresh("ST_HANG", "sthang");
    outbox_error err = {0};
    long long start;

    harness_nats_kill(SIGSTOP);
    start = harness_now_ms();
    cr_assert_eq(obx_stream_ensure(bus, &o, &err), OUTBOX_EUNAVAILABLE, "%s", err.message);
    cr_assert_lt(harness_now_ms() - start, 10000);
    harness_nats_kill(SIGCONT);
}

Test(stream, an_existing_stream_keeps_its_replicas_and_a_difference_is_logged_with_the_fix)
{
    struct obx_stream_options o = fresh("ST_REPL", "strepl");
    jsStreamInfo *si;

    ensure_ok(&o); /* made with one replica: this server is no cluster */
    o.replicas = 3;
    ensure_ok(&o);
    si = info("ST_REPL");
    cr_assert_eq(si->Config->Replicas, 1, "a daemon moved an existing stream's replicas");
    jsStreamInfo_Destroy(si);
    cr_assert(logged("stream settings differ stream=ST_REPL field=num_replicas want=3 have=1 "
                     "fix=\"nats stream edit ST_REPL --replicas 3\""),
              "%s", log_text);
}
