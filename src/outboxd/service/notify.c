/* SPDX-License-Identifier: MIT */
/*
 * notify.c - sd_notify datagrams. A socket is opened per message: they are
 * rare (state changes and a watchdog ping every few seconds), and nothing
 * is held open that an exec: handler could inherit.
 */
#include "notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/banned.h" /* last: poisons unsafe functions */

int
obx_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t path_len, state_len = strlen(state);
    ssize_t sent;
    int fd;

    if (path == NULL || path[0] == '\0') {
        return 0;
    }
    path_len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || path_len < 2 || path_len > sizeof(sa.sun_path)) {
        return -1;
    }
    memcpy(sa.sun_path, path, path_len);
    if (path[0] == '@') {
        sa.sun_path[0] = '\0'; /* abstract namespace: the name is the bytes after the NUL */
    }
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    do {
        sent = sendto(fd, state, state_len, MSG_NOSIGNAL, (struct sockaddr *)&sa,
                      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + path_len));
    } while (sent < 0 && errno == EINTR);
    close(fd);
    return sent == (ssize_t)state_len ? 0 : -1;
}

long long
obx_notify_watchdog_usec(void)
{
    const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    char *end;
    long long value;

    if (usec == NULL || usec[0] == '\0') {
        return 0;
    }
    if (pid != NULL && pid[0] != '\0' && strtoll(pid, &end, 10) != (long long)getpid()) {
        return 0;
    }
    value = strtoll(usec, &end, 10);
    return *end == '\0' && value > 0 ? value : 0;
}
