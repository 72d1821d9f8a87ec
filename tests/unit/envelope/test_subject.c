/* SPDX-License-Identifier: MIT */
/*
 * test_subject.c - subject tokens, routes and prefixes.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "envelope/subject.h"

Test(subject, builds_prefix_aggregate_type_and_event_type)
{
    char out[OBX_SUBJECT_CAP];

    cr_assert_eq(obx_subject_build("events", "movie", "review.logged", out, NULL), OUTBOX_OK);
    cr_assert_str_eq(out, "events.movie.review.logged");
}

Test(subject, refuses_wildcards_spaces_and_empty_tokens)
{
    const char *bad_event_types[] = {"*", ">", "a b", "a..b", ".a", "a.", "", "a\tb", "é"};
    outbox_error err = {0};

    for (size_t i = 0; i < sizeof(bad_event_types) / sizeof(bad_event_types[0]); i++) {
        err.code = OUTBOX_OK;
        cr_assert_eq(obx_route_check("movie", bad_event_types[i], &err), OUTBOX_EINVAL,
                     "accepted event_type \"%s\"", bad_event_types[i]);
        cr_assert(strstr(err.message, "event_type ") == err.message, "%s", err.message);
    }
}

Test(subject, refuses_an_event_type_that_repeats_the_aggregate_type)
{
    outbox_error err = {0};

    cr_assert_eq(obx_route_check("movie", "movie.logged", &err), OUTBOX_EINVAL);
    cr_assert_str_eq(err.message,
                     "event_type \"movie.logged\" must not start with aggregate_type \"movie.\"");
}

Test(subject, accepts_a_word_prefix_that_is_not_the_aggregate_token)
{
    cr_assert_eq(obx_route_check("movie", "movies.listed", NULL), OUTBOX_OK);
    cr_assert_eq(obx_route_check("movie", "movie", NULL), OUTBOX_OK);
}

Test(subject, limits_the_route_so_any_prefix_fits_255_bytes)
{
    char agg[101], type[123], out[OBX_SUBJECT_CAP];
    char prefix[OUTBOX_MAX_PREFIX_BYTES + 1];
    outbox_error err = {0};

    memset(agg, 'a', 100);
    agg[100] = '\0';
    memset(type, 'b', 122);
    type[121] = '\0'; /* 100 + 1 + 121 = 222 bytes: the largest route */
    memset(prefix, 'p', OUTBOX_MAX_PREFIX_BYTES);
    prefix[OUTBOX_MAX_PREFIX_BYTES] = '\0';
    cr_assert_eq(obx_subject_build(prefix, agg, type, out, NULL), OUTBOX_OK);
    cr_assert_eq(strlen(out), 255);

    type[121] = 'b';
    type[122] = '\0'; /* one byte more */
    cr_assert_eq(obx_route_check(agg, type, &err), OUTBOX_EINVAL);
    cr_assert_str_eq(err.message, "aggregate_type.event_type is 223 bytes, over the limit of 222");
}

Test(subject, checks_the_configured_prefix)
{
    outbox_error err = {0};

    cr_assert_eq(obx_subject_prefix_check("events", NULL), OUTBOX_OK);
    cr_assert_eq(obx_subject_prefix_check("acme.events", NULL), OUTBOX_OK);
    cr_assert_eq(obx_subject_prefix_check("", &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "subject prefix \"\"") != NULL, "%s", err.message);
    cr_assert_eq(obx_subject_prefix_check("events.>", NULL), OUTBOX_EINVAL);
    cr_assert_eq(obx_subject_prefix_check("a23456789012345678901234567890123", NULL),
                 OUTBOX_EINVAL);
}

Test(subject, quotes_control_characters_in_messages)
{
    outbox_error err = {0};

    cr_assert_eq(obx_route_check("mo\r\nvie", "x", &err), OUTBOX_EINVAL);
    cr_assert_null(strchr(err.message, '\n'), "raw newline in message: %s", err.message);
    cr_assert(strstr(err.message, "\"mo\\r\\nvie\"") != NULL, "%s", err.message);
}

Test(subject, filters_match_like_nats_subscriptions)
{
    cr_assert(obx_subject_matches("events.>", "events.movie.review.logged"));
    cr_assert(obx_subject_matches("events.movie.*", "events.movie.listed"));
    cr_assert(!obx_subject_matches("events.movie.*", "events.movie.review.logged"));
    cr_assert(obx_subject_matches("events.*.review.>", "events.movie.review.logged"));
    cr_assert(obx_subject_matches("events.movie.listed", "events.movie.listed"));
    cr_assert(!obx_subject_matches("events.movie.listed", "events.movie.listed.v2"));
    cr_assert(!obx_subject_matches("events.movie", "events.movie.listed"));
    cr_assert(!obx_subject_matches("events.>", "events"), "> needs at least one token");
    cr_assert(!obx_subject_matches("events.mov", "events.movie"));
    cr_assert(obx_subject_matches(">", "anything.at.all"));
    cr_assert(obx_subject_matches("*.*", "a.b"));
    cr_assert(!obx_subject_matches("*.*", "a"));
}

/* Which filters give a handler every event of an aggregate type (its order can be checked). */
Test(subject, a_filter_covers_an_aggregate_type_when_it_takes_every_event_type_of_it)
{
    const char *route = "events.movie.listed";
    size_t n = strlen("events.movie");

    cr_assert(obx_subject_filter_covers("events.>", route, n));
    cr_assert(obx_subject_filter_covers(">", route, n));
    cr_assert(obx_subject_filter_covers("events.movie.>", route, n));
    cr_assert(obx_subject_filter_covers("events.*.>", route, n));
    cr_assert(obx_subject_filter_covers("*.movie.>", route, n));
    cr_assert(!obx_subject_filter_covers("events.movie.*", route, n),
              "* is one token: not review.logged");
    cr_assert(!obx_subject_filter_covers("events.movie.listed", route, n));
    cr_assert(!obx_subject_filter_covers("events.movie", route, n));
    cr_assert(!obx_subject_filter_covers("events.order.>", route, n));
    cr_assert(!obx_subject_filter_covers("events.mov.>", route, n));
    cr_assert(!obx_subject_filter_covers("events.movies.>", route, n));
    cr_assert(!obx_subject_filter_covers("other.>", route, n));
    cr_assert(obx_subject_filter_covers("a.b.c.>", "a.b.c.d", 5), "a prefix of several tokens");
}

Test(subject, filters_are_checked_before_use)
{
    outbox_error err = {0};

    cr_assert_eq(obx_subject_filter_check("events.>", NULL), OUTBOX_OK);
    cr_assert_eq(obx_subject_filter_check("events.*.review.>", NULL), OUTBOX_OK);
    cr_assert_eq(obx_subject_filter_check(">", NULL), OUTBOX_OK);
    cr_assert_eq(obx_subject_filter_check("events.>.x", NULL), OUTBOX_EINVAL);
    cr_assert_eq(obx_subject_filter_check("events..x", NULL), OUTBOX_EINVAL);
    cr_assert_eq(obx_subject_filter_check("events.", NULL), OUTBOX_EINVAL);
    cr_assert_eq(obx_subject_filter_check("ev ents", &err), OUTBOX_EINVAL);
    cr_assert(strstr(err.message, "subject filter \"ev ents\"") != NULL, "%s", err.message);
    cr_assert_eq(obx_subject_filter_check("", NULL), OUTBOX_EINVAL);
}
