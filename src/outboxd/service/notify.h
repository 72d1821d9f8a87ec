/* SPDX-License-Identifier: MIT */
/*
 * notify.h - systemd's readiness protocol (sd_notify) without libsystemd:
 * a datagram of "KEY=VALUE" lines to the unix socket named by
 * $NOTIFY_SOCKET. Outside systemd the variable is unset and every call is
 * a no-op, so the daemon behaves the same everywhere.
 */
#ifndef OBX_NOTIFY_H
#define OBX_NOTIFY_H

/*
 * Sends `state` ("READY=1", "STOPPING=1", "WATCHDOG=1\nSTATUS=..." ...) to
 * $NOTIFY_SOCKET: a path, or "@name" for an abstract socket. Returns 0 when
 * sent or when the variable is unset, -1 when it names no usable socket.
 */
int obx_notify(const char *state);

/*
 * The watchdog timeout systemd asks for (WATCHDOG_USEC, in microseconds),
 * or 0 when there is none or it is meant for another process (WATCHDOG_PID).
 */
long long obx_notify_watchdog_usec(void);

#endif
