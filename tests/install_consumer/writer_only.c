/* SPDX-License-Identifier: MIT */
/* writer_only.c - builds an envelope with the installed writer library. */
#include <outbox/outbox.h>
#include <stdio.h>

int
main(void)
{
    outbox_event *ev = outbox_event_new();
    const char *json;
    size_t len;
    int ok = ev != NULL &&
             outbox_event_set_route(ev, "movie", "review.logged", NULL) == OUTBOX_OK &&
             outbox_event_set_aggregate_id(ev, "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b", NULL) ==
                 OUTBOX_OK &&
             outbox_event_set_payload_json(ev, "{}", 2, NULL) == OUTBOX_OK &&
             outbox_event_envelope_json(ev, &json, &len, NULL) == OUTBOX_OK;

    if (ok) {
        printf("%s %s\n", outbox_version(), json);
    }
    outbox_event_free(ev);
    return ok ? 0 : 1;
}
