/* SPDX-License-Identifier: MIT */
/*
 * test_fleet_window.c - the fleet's shared publish window: room granted at
 * once while there is some, the caps, waiting for room, the deficit
 * round-robin's order (a small request passes a large one still earning
 * its turn; nobody passes one whose turn has come), a stop while waiting,
 * and many relays at once never holding more than the window.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "fleet/fleet_window.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static void
sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&t, NULL);
}

static struct obx_fleet_window_view
view_of(struct obx_fleet_window *w)
{
    struct obx_fleet_window_view v;

    obx_fleet_window_view(w, &v);
    return v;
}

static struct obx_fleet_share_view
share_of(struct obx_fleet_share *s)
{
    struct obx_fleet_share_view v;

    obx_fleet_share_view(s, &v);
    return v;
}

/* Every share of `shares` leaves (each holding nothing by then), then the window goes. */
static void
close_window(struct obx_fleet_window *w, struct obx_fleet_share **shares, size_t n)
{
    cr_assert_eq(view_of(w).in_flight, 0, "room still taken at the end");
    for (size_t i = 0; i < n; i++) {
        obx_fleet_share_leave(shares[i]);
    }
    obx_fleet_window_free(w);
}

/* Waits up to 5 s for `waiting` requests to be queued. */
static void
wait_for_waiting(struct obx_fleet_window *w, size_t waiting)
{
    for (int i = 0; i < 5000 && view_of(w).waiting != waiting; i++) {
        sleep_ms(1);
    }
    cr_assert_eq(view_of(w).waiting, waiting, "requests waiting");
}

/* One relay asking once, in its own thread; `order` records when it was granted. */
struct asker {
    struct obx_fleet_share *share;
    size_t n, got;
    atomic_int stop;
    atomic_int *next_order;
    int order;
    pthread_t thread;
};

static void *
ask_main(void *arg)
{
    struct asker *a = arg;

    a->got = obx_fleet_share_acquire(a->share, a->n, &a->stop);
    a->order = atomic_fetch_add(a->next_order, 1);
    return NULL;
}

static void
ask(struct asker *a, struct obx_fleet_share *share, size_t n, atomic_int *next_order)
{
    a->share = share;
    a->n = n;
    a->got = 0;
    a->next_order = next_order;
    atomic_init(&a->stop, 0);
    cr_assert_eq(pthread_create(&a->thread, NULL, ask_main, a), 0);
}

Test(fleet_window, room_is_granted_at_once_within_the_caps)
{
    struct obx_fleet_window *w = obx_fleet_window_new(100);
    struct obx_fleet_share *a = obx_fleet_window_join(w, 60), *b = obx_fleet_window_join(w, 500);
    atomic_int stop = 0;

    cr_assert_eq(view_of(w).quantum, 50, "capacity split between two members");
    cr_assert_eq(obx_fleet_share_acquire(a, 80, &stop), 60, "a request is cut to its cap");
    cr_assert_eq(obx_fleet_share_acquire(b, 40, &stop), 40);
    cr_assert_eq(view_of(w).in_flight, 100);
    cr_assert_eq(share_of(a).in_flight, 60);
    obx_fleet_share_release(a, 60);
    obx_fleet_share_release(b, 40);
    cr_assert_eq(view_of(w).in_flight, 0);
    cr_assert_eq(obx_fleet_share_acquire(b, 500, &stop), 100, "a cap is cut to the window");
    obx_fleet_share_release(b, 100);
    close_window(w, (struct obx_fleet_share *[]){a, b}, 2);
}

Test(fleet_window, a_request_waits_for_room_and_gets_it_on_release, .timeout = 10)
{
    struct obx_fleet_window *w = obx_fleet_window_new(100);
    struct obx_fleet_share *holder = obx_fleet_window_join(w, 100);
    struct obx_fleet_share *s = obx_fleet_window_join(w, 100);
    atomic_int stop = 0, order = 0;
    struct asker a;

    cr_assert_eq(obx_fleet_share_acquire(holder, 70, &stop), 70);
    ask(&a, s, 50, &order);
    wait_for_waiting(w, 1);
    sleep_ms(50);
    cr_assert_eq(a.got, 0, "granted past the window");
    obx_fleet_share_release(holder, 70);
    pthread_join(a.thread, NULL);
    cr_assert_eq(a.got, 50);
    cr_assert(share_of(s).wait_seconds > 0.04, "its wait is counted");
    obx_fleet_share_release(s, 50);
    close_window(w, (struct obx_fleet_share *[]){holder, s}, 2);
}

/*
 * Three members, quantum 33. A full batch of 100 queued first needs three
 * turns of deficit; a request of 10 queued behind it is granted in its
 * first turn, before it. Then the batch has earned its turn but lacks room
 * (90 free): a new request of 10 must not pass it, though it would fit.
 */
Test(fleet_window, deficit_round_robin_order, .timeout = 10)
{
    struct obx_fleet_window *w = obx_fleet_window_new(100);
    struct obx_fleet_share *holder = obx_fleet_window_join(w, 100);
    struct obx_fleet_share *flooded = obx_fleet_window_join(w, 100);
    struct obx_fleet_share *quiet = obx_fleet_window_join(w, 100);
    atomic_int stop = 0, order = 0;
    struct asker big, small, late;

    cr_assert_eq(view_of(w).quantum, 33);
    cr_assert_eq(obx_fleet_share_acquire(holder, 100, &stop), 100);
    ask(&big, flooded, 100, &order);
    wait_for_waiting(w, 1);
    ask(&small, quiet, 10, &order);
    wait_for_waiting(w, 2);

    obx_fleet_share_release(holder, 100);
    pthread_join(small.thread, NULL);
    cr_assert_eq(small.got, 10);
    cr_assert_eq(view_of(w).waiting, 1, "the full batch waits for room: 90 free");

    ask(&late, holder, 10, &order);
    wait_for_waiting(w, 2);
    sleep_ms(50);
    cr_assert_eq(late.got, 0, "a later request passed the batch whose turn had come");

    obx_fleet_share_release(quiet, 10);
    pthread_join(big.thread, NULL);
    cr_assert_eq(big.got, 100);
    cr_assert_eq(big.order, 1, "the batch was granted right after the small request");
    obx_fleet_share_release(flooded, 100);
    pthread_join(late.thread, NULL);
    cr_assert_eq(late.got, 10);
    cr_assert_eq(late.order, 2);
    obx_fleet_share_release(holder, 10);
    close_window(w, (struct obx_fleet_share *[]){holder, flooded, quiet}, 3);
}

Test(fleet_window, a_stop_ends_the_wait_and_lets_the_others_through, .timeout = 10)
{
    struct obx_fleet_window *w = obx_fleet_window_new(100);
    struct obx_fleet_share *holder = obx_fleet_window_join(w, 100);
    struct obx_fleet_share *a = obx_fleet_window_join(w, 100), *b = obx_fleet_window_join(w, 100);
    atomic_int stop = 0, order = 0;
    struct asker first, second;

    cr_assert_eq(obx_fleet_share_acquire(holder, 50, &stop), 50);
    ask(&first, a, 100, &order); /* at the head, waiting for the whole window */
    wait_for_waiting(w, 1);
    ask(&second, b, 50, &order); /* would fit, but may not pass the head */
    wait_for_waiting(w, 2);
    atomic_store(&first.stop, 1);
    pthread_join(first.thread, NULL);
    cr_assert_eq(first.got, 0, "a stopped wait takes nothing");
    pthread_join(second.thread, NULL);
    cr_assert_eq(second.got, 50, "the head's stop let the next one in");
    cr_assert_eq(view_of(w).waiting, 0);
    obx_fleet_share_release(b, 50);
    obx_fleet_share_release(holder, 50);
    close_window(w, (struct obx_fleet_share *[]){holder, a, b}, 3);
}

/* Eight relays, batches of 1..100 in a window of 256: never over, nobody stuck. */
struct looper {
    struct obx_fleet_window *w;
    struct obx_fleet_share *share;
    unsigned seed;
    int rounds_done;
    atomic_int *over;
    pthread_t thread;
};

static void *
loop_main(void *arg)
{
    struct looper *l = arg;
    atomic_int stop = 0;

    for (int i = 0; i < 300; i++) {
        size_t n = 1 + (size_t)(rand_r(&l->seed) % 100);
        size_t got = obx_fleet_share_acquire(l->share, n, &stop);

        if (got != n || view_of(l->w).in_flight > 256) {
            atomic_fetch_add(l->over, 1);
        }
        if (i % 7 == 0) {
            sleep_ms(1);
        }
        obx_fleet_share_release(l->share, got);
        l->rounds_done++;
    }
    return NULL;
}

Test(fleet_window, many_relays_never_hold_more_than_the_window, .timeout = 30)
{
    struct obx_fleet_window *w = obx_fleet_window_new(256);
    struct looper l[8];
    struct obx_fleet_share *shares[8];
    atomic_int over = 0;

    for (int i = 0; i < 8; i++) {
        l[i] = (struct looper){.w = w,
                               .share = obx_fleet_window_join(w, 128),
                               .seed = 7u * (unsigned)i + 1,
                               .over = &over};
    }
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(pthread_create(&l[i].thread, NULL, loop_main, &l[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(l[i].thread, NULL);
        cr_assert_eq(l[i].rounds_done, 300);
    }
    cr_assert_eq(atomic_load(&over), 0, "a grant short of its request, or the window overrun");
    cr_assert_eq(view_of(w).waiting, 0);
    for (int i = 0; i < 8; i++) {
        shares[i] = l[i].share;
    }
    close_window(w, shares, 8);
}
