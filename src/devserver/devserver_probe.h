/* SPDX-License-Identifier: MIT */
/*
 * devserver_probe.h - the clock, the small probes worth polling (is a
 * process gone or stopped, is a port free or answering) and file helpers,
 * for the throwaway servers and the test harness.
 *
 * Nothing here sleeps a fixed time to let something happen: callers poll a
 * probe every few milliseconds until a deadline, so a fast machine does not
 * wait and a slow one does not fail.
 */
#ifndef OBX_DEVSERVER_PROBE_H
#define OBX_DEVSERVER_PROBE_H

#include "common/clock.h"

#include <stddef.h>
#include <sys/types.h>

/* 1 when pid is dead or a zombie (PID 1 of a container may never reap an orphan). */
int obx_dev_pid_gone(pid_t pid);

/* Polls obx_dev_pid_gone; 1 once gone, 0 if still there after timeout_ms. */
int obx_dev_wait_pid_gone(pid_t pid, int timeout_ms);

/* 1 when pid is stopped (SIGSTOP). */
int obx_dev_pid_stopped(pid_t pid);

/* Start time of pid in clock ticks after boot (tells a reused pid apart), or -1. */
long long obx_dev_pid_starttime(pid_t pid);

/* 1 when /proc/<pid>/cmdline contains `needle`. */
int obx_dev_cmdline_contains(pid_t pid, const char *needle);

/* A loopback port that was free a moment ago and that this process never had before, or -1. */
int obx_dev_free_port(void);

/* 1 when a TCP connect to 127.0.0.1:port succeeds. */
int obx_dev_tcp_connects(int port);

/* "<dir>/<name>" into buf; 0, or -1 when it does not fit. */
int obx_dev_path(char *buf, size_t len, const char *dir, const char *name);

/* A whole file, NUL-terminated, malloc'd (the caller frees it); NULL if unreadable. */
char *obx_dev_read_file(const char *path, size_t *len);

/*
 * The last `max` bytes of a file, for error messages, in a static buffer
 * valid until the next call (not thread-safe); "(no <path>)" if unreadable.
 */
const char *obx_dev_file_tail(const char *path, size_t max);

#endif
