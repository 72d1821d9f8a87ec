/* SPDX-License-Identifier: MIT */
/*
 * health.h - `outboxd health [--url URL]`: asks a running daemon whether it
 * is ready, for container health checks in images that carry no curl.
 */
#ifndef OBX_HEALTH_H
#define OBX_HEALTH_H

/*
 * GETs URL (default http://$OUTBOX_HTTP_ADDR/readyz, a wildcard host asked
 * on loopback). Returns the exit code: 0 it answered 200, 1 anything else
 * (another status, refused, timed out), 2 bad usage.
 */
int obx_cmd_health(int argc, char **argv);

#endif
