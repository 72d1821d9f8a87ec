/* SPDX-License-Identifier: MIT */
/* with_worker.c - configures a relay with the installed worker library, by key. */
#include <outbox/worker.h>
#include <stdio.h>

int
main(void)
{
    outbox_config *cfg = outbox_config_new(OUTBOX_CONFIG_RELAY);
    outbox_relay *relay = NULL;
    outbox_error err;
    char batch[32];

    if (cfg == NULL ||
        outbox_config_set(cfg, "database_url", "postgresql://localhost/none", &err) != OUTBOX_OK ||
        outbox_config_set_int(cfg, "batch_size", 250, &err) != OUTBOX_OK ||
        outbox_config_get(cfg, "batch_size", batch, sizeof(batch), &err) != OUTBOX_OK ||
        outbox_relay_new(cfg, &relay, &err) != OUTBOX_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    /* A key the relay does not take is refused by name, not ignored. */
    if (outbox_config_set(cfg, "consumer_name", "x", &err) != OUTBOX_EINVAL) {
        fprintf(stderr, "consumer_name was taken by a relay configuration\n");
        return 1;
    }
    outbox_config_free(cfg);
    outbox_relay_free(relay);
    printf("worker ok %s batch_size=%s\n", outbox_status_name(OUTBOX_OK), batch);
    return 0;
}
