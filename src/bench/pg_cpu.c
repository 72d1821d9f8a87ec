/* SPDX-License-Identifier: MIT */
/*
 * pg_cpu.c - the CPU time (user + system) a PostgreSQL server on this
 * machine spends, read from /proc: its postmaster, the postmaster's live
 * children (backends, autovacuum, WAL writer, checkpointer...) and the
 * children it already reaped (the postmaster's cutime + cstime). The
 * server is found from one of its backends' pids, and checked to be the
 * one the connection reaches by the postmaster's start time.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#include "common/banned.h" /* last: poisons unsafe functions */

/* Fields of /proc/<pid>/stat by their number in proc(5). */
enum {
    STAT_PPID = 4,
    STAT_UTIME = 14,
    STAT_STIME = 15,
    STAT_CUTIME = 16,
    STAT_CSTIME = 17,
    STAT_STARTTIME = 22
};

/* The next space-separated number after `*p`; -1 when there is none. */
static int
next_number(const char **p, long long *out)
{
    const char *s = *p;
    char *end;

    while (*s == ' ') {
        s++;
    }
    if (!(*s == '-' || (*s >= '0' && *s <= '9'))) {
        return -1;
    }
    errno = 0;
    *out = strtoll(s, &end, 10);
    if (errno != 0 || end == s || (*end != ' ' && *end != '\n' && *end != '\0')) {
        return -1;
    }
    *p = end;
    return 0;
}

/* Skips one space-separated field; -1 at the end of the line. */
static int
skip_field(const char **p)
{
    const char *s = *p;

    while (*s == ' ') {
        s++;
    }
    if (*s == '\0' || *s == '\n') {
        return -1;
    }
    while (*s != ' ' && *s != '\0' && *s != '\n') {
        s++;
    }
    *p = s;
    return 0;
}

int
obx_bench_proc_stat_parse(const char *line, struct obx_bench_proc_stat *out)
{
    const char *open = strchr(line, '('), *close = strrchr(line, ')'), *p;
    long long v[STAT_STARTTIME + 1];
    long long pid;
    size_t comm_len;

    memset(out, 0, sizeof(*out));
    p = line;
    /* "pid (comm) state ppid ...": comm is anything, ')' included, so it ends at the last ')'. */
    if (open == NULL || close == NULL || close < open || next_number(&p, &pid) != 0 || pid <= 0 ||
        p + 1 != open || *p != ' ') {
        return -1;
    }
    comm_len = (size_t)(close - open - 1);
    comm_len = comm_len < sizeof(out->comm) - 1 ? comm_len : sizeof(out->comm) - 1;
    memcpy(out->comm, open + 1, comm_len);
    out->comm[comm_len] = '\0';
    p = close + 1;
    /* Field 3, the state, is a letter; fields 4 to 22 are numbers. */
    if (skip_field(&p) != 0) {
        return -1;
    }
    for (int field = STAT_PPID; field <= STAT_STARTTIME; field++) {
        if (next_number(&p, &v[field]) != 0) {
            return -1;
        }
    }
    if (v[STAT_UTIME] < 0 || v[STAT_STIME] < 0 || v[STAT_CUTIME] < 0 || v[STAT_CSTIME] < 0) {
        return -1;
    }
    out->pid = (long)pid;
    out->ppid = (long)v[STAT_PPID];
    out->utime = v[STAT_UTIME];
    out->stime = v[STAT_STIME];
    out->cutime = v[STAT_CUTIME];
    out->cstime = v[STAT_CSTIME];
    out->starttime = v[STAT_STARTTIME];
    return 0;
}

long long
obx_bench_proc_btime(const char *proc_stat)
{
    for (const char *line = proc_stat; line != NULL && *line != '\0';) {
        const char *nl = strchr(line, '\n');

        if (strncmp(line, "btime ", 6) == 0) {
            const char *p = line + 6;
            long long v;

            return next_number(&p, &v) == 0 && v > 0 ? v : -1;
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    return -1;
}

/* A /proc file's start, NUL-terminated; 0 or -1. */
static int
read_proc(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t have = 0;

    if (fd < 0) {
        return -1;
    }
    while (have < cap - 1) {
        ssize_t n = read(fd, buf + have, cap - 1 - have);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        have += (size_t)n;
    }
    close(fd);
    buf[have] = '\0';
    return have > 0 ? 0 : -1;
}

/* The boot time from /proc/stat, line by line (its intr line can be long); -1. */
static long long
boot_time(void)
{
    FILE *f = fopen("/proc/stat", "re");
    char *line = NULL;
    size_t cap = 0;
    long long btime = -1;

    if (f == NULL) {
        return -1;
    }
    while (btime < 0 && getline(&line, &cap, f) > 0) {
        btime = obx_bench_proc_btime(line);
    }
    free(line);
    fclose(f);
    return btime;
}

static int
read_stat(long pid, struct obx_bench_proc_stat *st)
{
    char path[64], line[1024];

    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    return read_proc(path, line, sizeof(line)) == 0 ? obx_bench_proc_stat_parse(line, st) : -1;
}

/* The postmaster's own ticks and its reaped children's, plus its live children's; -1. */
static long long
server_ticks(long postmaster)
{
    long long total = -1;

    /*
     * A child reaped during the scan moves its time into the postmaster's
     * cutime/cstime between the two reads: counted twice or not at all.
     * Then the scan is done again (a few times at most).
     */
    for (int attempt = 0; attempt < 3; attempt++) {
        struct obx_bench_proc_stat before, after, st;
        long long children = 0;
        struct dirent *e;
        DIR *dir;

        if (read_stat(postmaster, &before) != 0 || (dir = opendir("/proc")) == NULL) {
            return -1;
        }
        while ((e = readdir(dir)) != NULL) {
            char *end;
            long pid = strtol(e->d_name, &end, 10);

            if (*end == '\0' && pid > 0 && pid != postmaster && read_stat(pid, &st) == 0 &&
                st.ppid == postmaster) {
                children += st.utime + st.stime;
            }
        }
        closedir(dir);
        if (read_stat(postmaster, &after) != 0) {
            return -1;
        }
        total = after.utime + after.stime + after.cutime + after.cstime + children;
        if (after.cutime == before.cutime && after.cstime == before.cstime) {
            break;
        }
    }
    return total;
}

/* Says once per run why PostgreSQL's CPU is not reported; returns 0 (no postmaster). */
__attribute__((format(printf, 1, 2))) static long
not_measured(const char *why, ...)
{
    static int said;
    va_list ap;

    if (!said) {
        said = 1;
        fputs("outbox-bench: pg_cpu_us_per_event is null: ", stderr);
        va_start(ap, why);
        vfprintf(stderr, why, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    return 0;
}

long
obx_bench_pg_postmaster(PGconn *conn)
{
    long long backend = obx_bench_scalar(conn, "SELECT pg_backend_pid()");
    long long started =
        obx_bench_scalar(conn, "SELECT extract(epoch FROM pg_postmaster_start_time())::bigint");
    struct obx_bench_proc_stat be, pm;
    long long btime, ticks_per_s = sysconf(_SC_CLK_TCK), pm_started;

    if (backend <= 0 || started <= 0) {
        return not_measured("the server did not give its backend's pid (%ld)", (long)backend);
    }
    if (read_stat((long)backend, &be) != 0) {
        return not_measured("no process %ld (the bench's backend) in /proc: the server is not on "
                            "this machine, or /proc is unreadable",
                            (long)backend);
    }
    if (read_stat(be.ppid, &pm) != 0 || (btime = boot_time()) < 0 || ticks_per_s <= 0) {
        return not_measured("cannot read the postmaster (pid %ld) or the boot time in /proc",
                            be.ppid);
    }
    /* A pid in another pid namespace (a container) can name some other process here. */
    pm_started = btime + pm.starttime / ticks_per_s;
    if (pm_started < started - 10 || pm_started > started + 10) {
        return not_measured("process %ld here did not start with the server's postmaster: the "
                            "server is not on this machine",
                            be.ppid);
    }
    return be.ppid;
}

void
obx_bench_pg_cpu_start(struct obx_bench_pg_cpu *m, long postmaster)
{
    m->postmaster = postmaster;
    m->ticks = postmaster > 0 ? server_ticks(postmaster) : -1;
}

double
obx_bench_pg_cpu_us_per_event(const struct obx_bench_pg_cpu *m, long long events)
{
    long long now = m->ticks >= 0 ? server_ticks(m->postmaster) : -1;
    long ticks_per_s = sysconf(_SC_CLK_TCK);

    if (now < 0 || now < m->ticks || events <= 0 || ticks_per_s <= 0) {
        return -1;
    }
    return (double)(now - m->ticks) * 1e6 / (double)ticks_per_s / (double)events;
}

json_t *
obx_bench_number_or_null(double v)
{
    return v >= 0 ? json_real(v) : json_null();
}
