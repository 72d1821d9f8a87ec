/* SPDX-License-Identifier: MIT */
/* with_worker.c - configures a relay with the installed worker library. */
#include <outbox/worker.h>
#include <stdio.h>

int
main(void)
{
    outbox_relay_options opts;
    outbox_relay *relay = NULL;
    outbox_error err;

    outbox_relay_options_init(&opts);
    opts.database_url = "postgresql://localhost/none";
    if (outbox_relay_new(&opts, &relay, &err) != OUTBOX_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    outbox_relay_free(relay);
    printf("worker ok %s\n", outbox_status_name(OUTBOX_OK));
    return 0;
}
