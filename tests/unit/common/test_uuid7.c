/* SPDX-License-Identifier: MIT */
/*
 * test_uuid7.c - UUIDv7: layout, order, uniqueness, clock trouble, fork.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/uuid7.h"

static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

Test(uuid7, carries_version_7_and_the_rfc_variant)
{
    uint8_t id[16];

    for (int i = 0; i < 1000; i++) {
        cr_assert_eq(obx_uuid7_generate(id), 0);
        cr_assert_eq(id[6] >> 4, 7, "version nibble is %d", id[6] >> 4);
        cr_assert_eq(id[8] >> 6, 2, "variant bits are %d", id[8] >> 6);
    }
}

Test(uuid7, carries_the_current_unix_milliseconds)
{
    uint8_t id[16];
    int64_t before = now_ms(), after;

    obx_uuid7_generate(id);
    after = now_ms();
    cr_assert(obx_uuid7_unix_ms(id) >= before && obx_uuid7_unix_ms(id) <= after + 1,
              "timestamp %lld not within [%lld, %lld]", (long long)obx_uuid7_unix_ms(id),
              (long long)before, (long long)after);
}

Test(uuid7, a_million_ids_strictly_increase_so_none_repeats, .timeout = 60)
{
    enum { COUNT = 1000000 };
    uint8_t prev[16], next[16];

    obx_uuid7_generate(prev);
    for (int i = 1; i < COUNT; i++) {
        obx_uuid7_generate(next);
        if (memcmp(prev, next, 16) >= 0) {
            cr_assert_fail("id %d does not sort after the one before it", i);
        }
        memcpy(prev, next, 16);
    }
}

Test(uuid7, text_sorts_like_bytes)
{
    uint8_t a[16], b[16];
    char ta[OBX_UUID_TEXT_LEN + 1], tb[OBX_UUID_TEXT_LEN + 1];

    for (int i = 0; i < 10000; i++) {
        obx_uuid7_generate(a);
        obx_uuid7_generate(b);
        obx_uuid_format(a, ta);
        obx_uuid_format(b, tb);
        cr_assert_lt(strcmp(ta, tb), 0, "%s !< %s", ta, tb);
    }
}

Test(uuid7, keeps_order_when_the_clock_goes_back)
{
    struct obx_uuid7_state st = {0};
    uint8_t rnd[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    uint8_t first[16], second[16];

    obx_uuid7_next(&st, 1000000, rnd, first);
    obx_uuid7_next(&st, 999000, rnd, second); /* one second back */
    cr_assert_gt(memcmp(second, first, 16), 0);
    cr_assert_eq(obx_uuid7_unix_ms(second), 1000000, "the earlier clock must not leak into ids");
}

Test(uuid7, moves_to_the_next_millisecond_when_the_counter_runs_out)
{
    struct obx_uuid7_state st = {
        .last_ms = 5000, .rand_a = 0x0fff, .rand_b = (UINT64_C(1) << 62) - 1};
    uint8_t rnd[10] = {0};
    uint8_t id[16];

    obx_uuid7_next(&st, 5000, rnd, id);
    cr_assert_eq(obx_uuid7_unix_ms(id), 5001);
    cr_assert_eq(id[6] >> 4, 7);
}

Test(uuid7, a_new_millisecond_leaves_counter_headroom)
{
    struct obx_uuid7_state st = {0};
    uint8_t rnd[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    uint8_t id[16];

    obx_uuid7_next(&st, 42, rnd, id);
    cr_assert_eq(st.rand_a & 0x0800, 0, "top bit of rand_a must start clear");
}

Test(uuid7, a_forked_child_does_not_repeat_its_parents_ids)
{
    int fds[2];
    uint8_t parent_id[16], child_id[16];
    pid_t pid;

    obx_uuid7_generate(parent_id); /* fills the random pool before the fork */
    cr_assert_eq(pipe(fds), 0);
    pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        obx_uuid7_generate(child_id);
        _exit(write(fds[1], child_id, 16) == 16 ? 0 : 1);
    }
    obx_uuid7_generate(parent_id);
    cr_assert_eq(read(fds[0], child_id, 16), 16);
    waitpid(pid, NULL, 0);
    /* Same pool bytes would give the same random tail. */
    cr_assert_neq(memcmp(parent_id + 8, child_id + 8, 8), 0);
}

Test(uuid7, formats_lower_case_and_parses_either_case)
{
    uint8_t id[16], back[16];
    char text[OBX_UUID_TEXT_LEN + 1];

    obx_uuid7_generate(id);
    obx_uuid_format(id, text);
    cr_assert_eq(strlen(text), 36);
    for (const char *p = text; *p; p++) {
        cr_assert(!(*p >= 'A' && *p <= 'F'), "upper-case hex in %s", text);
    }
    cr_assert_eq(obx_uuid_parse(text, back), 0);
    cr_assert_eq(memcmp(id, back, 16), 0);
    cr_assert_eq(obx_uuid_parse("0190A3B2-1C2D-7E3F-8A9B-0C1D2E3F4A5B", back), 0);
}

Test(uuid7, refuses_non_canonical_text)
{
    uint8_t out[16];
    const char *bad[] = {
        "",
        "xyz",
        "{0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b}",
        "0190a3b21c2d7e3f8a9b0c1d2e3f4a5b",
        "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5",
        "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b0",
        "0190a3b2-1c2d-7e3f-8a9b_0c1d2e3f4a5b",
        "g190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b",
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cr_assert_eq(obx_uuid_parse(bad[i], out), -1, "accepted \"%s\"", bad[i]);
    }
}

Test(uuid7, random_fill_fills_a_whole_block_past_getrandoms_short_reads)
{
    /* getrandom(2) may return a block over 256 bytes in parts; every part is filled. Two
     * zeroed blocks, each with at least one non-zero byte in every 16 after the first 256
     * (the chance of an all-zero 16 bytes is 2^-128), and not equal to each other. */
    enum { BLOCK = 4096 };
    static uint8_t a[BLOCK], b[BLOCK];
    static const uint8_t zero[16];

    cr_assert_eq(obx_random_fill(a, sizeof(a)), 0);
    cr_assert_eq(obx_random_fill(b, sizeof(b)), 0);
    for (size_t at = 256; at < BLOCK; at += 16) {
        cr_assert_neq(memcmp(a + at, zero, 16), 0, "bytes %zu-%zu were left zero", at, at + 15);
    }
    cr_assert_neq(memcmp(a, b, BLOCK), 0, "two fills gave the same bytes");
}
