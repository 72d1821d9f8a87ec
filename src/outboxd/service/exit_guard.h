/* SPDX-License-Identifier: MIT */
/*
 * exit_guard.h - a bound on the time from a stop request to the end of the
 * process, whatever stalls after the worker is done.
 */
#ifndef OBX_EXIT_GUARD_H
#define OBX_EXIT_GUARD_H

/* Seconds the guard allows after the drain timeout before it ends the process. */
#define OBX_EXIT_GRACE_SECONDS 3

/*
 * Registers the exit handler that disarms the guard. Call first thing in
 * main, before anything registers exit handlers of its own: handlers run
 * in reverse order, so the guard still covers the libraries' handlers and
 * is disarmed before a sanitizer build's leak check.
 */
void obx_exit_guard_install(void);

/*
 * Arms the guard: if the process still runs `seconds` from now, one line
 * is written to stderr and the process ends with _exit() and the code
 * last given to obx_exit_guard_set_code() (1 if none). Later calls do
 * nothing. Signals must be blocked already (the guard's thread inherits
 * the caller's mask).
 */
void obx_exit_guard_arm(int seconds);

/* The exit code the process would end with, once it is known. */
void obx_exit_guard_set_code(int code);

#endif
