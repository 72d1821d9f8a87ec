/* SPDX-License-Identifier: MIT */
/*
 * test_envelope_cases.c - the shared corpus through the C writer, with no
 * server: validation happens before anything is sent, so with no
 * connection a valid event gets as far as OUTBOX_EUNAVAILABLE and an
 * invalid one stops at OUTBOX_EINVAL with the expected message.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "envelope_cases.h"

static void
run_case(const outbox_writer *w, const struct envelope_case *c, int in_memory, int want_valid)
{
    outbox_event *ev = NULL;
    outbox_error err = {0};
    outbox_status st = envelope_case_build(c, in_memory, &ev, &err);

    if (st == OUTBOX_OK) {
        st = outbox_writer_enqueue(w, NULL, ev, &err);
    }
    if (want_valid) {
        cr_expect_eq(st, OUTBOX_EUNAVAILABLE, "valid/%s (%s): refused with \"%s\"", c->name,
                     in_memory ? "json_t" : "text", err.message);
    } else {
        cr_expect_eq(st, OUTBOX_EINVAL, "invalid/%s (%s): got %s \"%s\"", c->name,
                     in_memory ? "json_t" : "text", outbox_status_name(st), err.message);
        cr_expect(strstr(err.message, c->expected_error) != NULL,
                  "invalid/%s (%s): message \"%s\" lacks \"%s\"", c->name,
                  in_memory ? "json_t" : "text", err.message, c->expected_error);
    }
    outbox_event_free(ev);
}

static void
run_kind(const char *kind, int want_valid)
{
    struct envelope_case *cases;
    size_t count = envelope_cases_load(kind, &cases);
    outbox_writer *w = NULL;

    cr_assert_gt(count, 10, "too few %s cases found", kind);
    cr_assert_eq(outbox_writer_new(NULL, &w, NULL), OUTBOX_OK);
    for (size_t i = 0; i < count; i++) {
        if (!want_valid) {
            cr_assert_not_null(cases[i].expected_error, "invalid/%s has no .error file",
                               cases[i].name);
        }
        run_case(w, &cases[i], 0, want_valid);
        run_case(w, &cases[i], 1, want_valid);
    }
    outbox_writer_free(w);
    envelope_cases_free(cases, count);
}

Test(envelope_cases, every_valid_case_passes_the_c_writer, .timeout = 60)
{
    run_kind("valid", 1);
}

Test(envelope_cases, every_invalid_case_fails_the_c_writer_with_its_message, .timeout = 60)
{
    run_kind("invalid", 0);
}
