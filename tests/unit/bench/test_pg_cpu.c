/* SPDX-License-Identifier: MIT */
/*
 * test_pg_cpu.c - outbox-bench's /proc reading for PostgreSQL's CPU time:
 * /proc/<pid>/stat lines (a comm with spaces and ')'), /proc/stat's boot
 * time, and a meter counting a reaped child's CPU.
 */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"

/* Fields 1-22 of a real line (a backend), then the rest as the kernel prints them. */
static const char backend_line[] =
    "4242 (postgres) S 4100 4100 4100 0 -1 4194560 1523 0 0 0 731 122 9 3 20 0 1 0 "
    "987654 225951744 3590 18446744073709551615 1 1 0 0 0 0 4194304 19935232 84487 0 0 0 "
    "17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

Test(pg_cpu, parses_the_fields_it_reads)
{
    struct obx_bench_proc_stat st;

    cr_assert_eq(obx_bench_proc_stat_parse(backend_line, &st), 0);
    cr_assert_eq(st.pid, 4242);
    cr_assert_str_eq(st.comm, "postgres");
    cr_assert_eq(st.ppid, 4100);
    cr_assert_eq(st.utime, 731);
    cr_assert_eq(st.stime, 122);
    cr_assert_eq(st.cutime, 9);
    cr_assert_eq(st.cstime, 3);
    cr_assert_eq(st.starttime, 987654);
}

Test(pg_cpu, reads_past_a_comm_holding_spaces_and_parentheses)
{
    struct obx_bench_proc_stat st;
    const char *line = "77 (a) b) 5 6 (x) R 1 77 77 0 -1 0 0 0 0 0 40 2 100 7 20 0 1 0 555 0 0\n";

    cr_assert_eq(obx_bench_proc_stat_parse(line, &st), 0);
    cr_assert_str_eq(st.comm, "a) b) 5 6 (x", "comm ends at the last ')'");
    cr_assert_eq(st.pid, 77);
    cr_assert_eq(st.ppid, 1);
    cr_assert_eq(st.utime, 40);
    cr_assert_eq(st.stime, 2);
    cr_assert_eq(st.cutime, 100);
    cr_assert_eq(st.cstime, 7);
    cr_assert_eq(st.starttime, 555);
}

Test(pg_cpu, keeps_the_start_of_a_long_comm)
{
    struct obx_bench_proc_stat st;
    char line[512];

    snprintf(line, sizeof(line), "9 (%0100d) S 1 0 0 0 0 0 0 0 0 0 1 2 3 4 0 0 0 0 5", 0);
    cr_assert_eq(obx_bench_proc_stat_parse(line, &st), 0);
    cr_assert_eq(strlen(st.comm), sizeof(st.comm) - 1);
    cr_assert_eq(st.utime, 1);
    cr_assert_eq(st.cstime, 4);
    cr_assert_eq(st.starttime, 5);
}

Test(pg_cpu, refuses_malformed_lines)
{
    const char *bad[] = {
        "",
        "4242 postgres S 4100 1 1 0 -1 0 0 0 0 0 731 122 9 3 20 0 1 0 987654",   /* no comm */
        "4242 (postgres S 4100 1 1 0 -1 0 0 0 0 0 731 122 9 3 20 0 1 0 987654",  /* no ')' */
        "(postgres) S 4100 1 1 0 -1 0 0 0 0 0 731 122 9 3 20 0 1 0 987654",      /* no pid */
        "x42 (postgres) S 4100 1 1 0 -1 0 0 0 0 0 731 122 9 3 20 0 1 0 987654",  /* bad pid */
        "4242(postgres) S 4100 1 1 0 -1 0 0 0 0 0 731 122 9 3 20 0 1 0 987654",  /* no space */
        "4242 (postgres) S 4100 1 1 0 -1 0 0 0 0 0 731 122 9 3",                 /* cut short */
        "4242 (postgres)",                                                       /* no fields */
        "4242 (postgres) S 4100 1 1 0 -1 0 0 0 0 0 7x1 122 9 3 20 0 1 0 987654", /* not a number */
        "4242 (postgres) S 4100 1 1 0 -1 0 0 0 0 0 -5 122 9 3 20 0 1 0 987654",  /* negative time */
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct obx_bench_proc_stat st;

        cr_assert_eq(obx_bench_proc_stat_parse(bad[i], &st), -1, "accepted \"%s\"", bad[i]);
    }
}

Test(pg_cpu, parses_this_processs_own_stat)
{
    struct obx_bench_proc_stat st;
    char line[1024] = {0};
    FILE *f = fopen("/proc/self/stat", "r");

    cr_assert_not_null(f);
    cr_assert_not_null(fgets(line, sizeof(line), f));
    fclose(f);
    cr_assert_eq(obx_bench_proc_stat_parse(line, &st), 0, "%s", line);
    cr_assert_eq(st.pid, (long)getpid());
    cr_assert_eq(st.ppid, (long)getppid());
}

Test(pg_cpu, finds_the_boot_time_in_proc_stat)
{
    cr_assert_eq(obx_bench_proc_btime("cpu  1 2 3\nintr 5\nbtime 1767225600\nprocesses 9\n"),
                 1767225600);
    cr_assert_eq(obx_bench_proc_btime("btime 42\n"), 42);
    cr_assert_eq(obx_bench_proc_btime("cpu 1\nxbtime 5\n"), -1);
    cr_assert_eq(obx_bench_proc_btime("cpu 1\n"), -1);
    cr_assert_eq(obx_bench_proc_btime("btime \n"), -1);
}

/* Burns `seconds` of this process's CPU. */
static void
burn(double seconds)
{
    struct timespec ts;
    volatile unsigned long spin = 0;

    do {
        for (int i = 0; i < 100000; i++) {
            spin = spin + 1;
        }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    } while ((double)ts.tv_sec + (double)ts.tv_nsec / 1e9 < seconds);
}

Test(pg_cpu, counts_a_child_that_exited_and_was_reaped)
{
    struct obx_bench_pg_cpu m;
    pid_t child;
    double us;

    /* This process stands for the postmaster, a child for a backend that ends. */
    obx_bench_pg_cpu_start(&m, (long)getpid());
    cr_assert_geq(m.ticks, 0);
    child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        burn(0.3);
        _exit(0);
    }
    cr_assert_eq(waitpid(child, NULL, 0), child);
    us = obx_bench_pg_cpu_us_per_event(&m, 1000);
    cr_assert_geq(us, 250.0, "%.1f us per event for 0.3 s over 1000 events", us);
}

Test(pg_cpu, is_unknown_without_a_postmaster)
{
    struct obx_bench_pg_cpu m;

    obx_bench_pg_cpu_start(&m, 0);
    cr_assert_lt(obx_bench_pg_cpu_us_per_event(&m, 1000), 0);
    cr_assert(json_is_null(obx_bench_number_or_null(-1)));
}
