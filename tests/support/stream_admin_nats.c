/* SPDX-License-Identifier: MIT */
/*
 * stream_admin_nats.c - stream deletion and creation through nats.c (see stream_admin_nats.h).
 */
#include "stream_admin_nats.h"

#include <stdio.h>

#include <nats/nats.h>

#include "common/banned.h" /* last: poisons unsafe functions */

enum { NS_PER_S = 1000000000 };

static int
with_js(const char *nats_url, const char *stream, const struct stream_admin_spec *spec, char *err,
        size_t cap)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsErrCode code = 0;
    natsStatus s = natsConnection_ConnectTo(&nc, nats_url);

    if (s == NATS_OK) {
        s = natsConnection_JetStream(&js, nc, NULL);
    }
    if (s == NATS_OK && spec == NULL) {
        s = js_DeleteStream(js, stream, NULL, &code);
    } else if (s == NATS_OK) {
        jsStreamConfig cfg;
        jsStreamInfo *info = NULL;
        const char *subj[] = {spec->subjects};

        jsStreamConfig_Init(&cfg);
        cfg.Name = stream;
        cfg.Subjects = subj;
        cfg.SubjectsLen = 1;
        cfg.Storage = js_FileStorage;
        cfg.Retention = spec->retention;
        cfg.Duplicates = spec->duplicates_s * NS_PER_S;
        cfg.MaxAge = spec->max_age_s * NS_PER_S;
        cfg.MaxMsgSize = spec->max_msg_size > 0 ? spec->max_msg_size : -1;
        s = spec->update ? js_UpdateStream(&info, js, &cfg, NULL, &code)
                         : js_AddStream(&info, js, &cfg, NULL, &code);
        jsStreamInfo_Destroy(info);
    }
    if (s != NATS_OK) {
        snprintf(err, cap, "%s stream %s: %s (jetstream error %d)",
                 spec == NULL   ? "deleting"
                 : spec->update ? "updating"
                                : "creating",
                 stream, natsStatus_GetText(s), (int)code);
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
    struct stream_admin_spec spec = {.name = stream, .subjects = subjects};

    return with_js(nats_url, stream, &spec, err, cap);
}

int
stream_admin_put(const char *nats_url, const struct stream_admin_spec *spec, char *err, size_t cap)
{
    return with_js(nats_url, spec->name, spec, err, cap);
}
