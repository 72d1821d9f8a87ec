/* SPDX-License-Identifier: MIT */
/*
 * stream_admin_nats.c - stream deletion and creation through nats.c (see stream_admin_nats.h).
 */
#include "stream_admin_nats.h"

#include <stdio.h>

#include <nats/nats.h>

#include "common/banned.h" /* last: poisons unsafe functions */

static int
with_js(const char *nats_url, const char *stream, const char *subjects, char *err, size_t cap)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsErrCode code = 0;
    natsStatus s = natsConnection_ConnectTo(&nc, nats_url);

    if (s == NATS_OK) {
        s = natsConnection_JetStream(&js, nc, NULL);
    }
    if (s == NATS_OK && subjects == NULL) {
        s = js_DeleteStream(js, stream, NULL, &code);
    } else if (s == NATS_OK) {
        jsStreamConfig cfg;
        jsStreamInfo *info = NULL;
        const char *subj[] = {subjects};

        jsStreamConfig_Init(&cfg);
        cfg.Name = stream;
        cfg.Subjects = subj;
        cfg.SubjectsLen = 1;
        cfg.Storage = js_FileStorage;
        s = js_AddStream(&info, js, &cfg, NULL, &code);
        jsStreamInfo_Destroy(info);
    }
    if (s != NATS_OK) {
        snprintf(err, cap, "%s stream %s: %s (jetstream error %d)",
                 subjects == NULL ? "deleting" : "creating", stream, natsStatus_GetText(s),
                 (int)code);
    }
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return s == NATS_OK ? 0 : -1;
}

int
stream_admin_delete(const char *nats_url, const char *stream, char *err, size_t cap)
{
    return with_js(nats_url, stream, NULL, err, cap);
}

int
stream_admin_create(const char *nats_url, const char *stream, const char *subjects, char *err,
                    size_t cap)
{
    return with_js(nats_url, stream, subjects, err, cap);
}
