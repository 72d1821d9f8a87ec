/* SPDX-License-Identifier: MIT */
/*
 * raw_http_post.c - the http case's baseline: the same POSTs an http:
 * handler sends (its headers and body for an event like the case's),
 * through libcurl's multi interface with the same number in flight, to the
 * same local endpoint, with no pgoutbox: what the HTTP round trips alone
 * cost.
 */
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "bench/bench.h"

#include "common/banned.h" /* last: poisons unsafe functions */

static size_t
drop(char *data, size_t size, size_t n, void *arg)
{
    (void)data;
    (void)arg;
    return size * n;
}

static CURL *
post(const char *url, const char *body, size_t body_len, const struct curl_slist *headers)
{
    CURL *e = curl_easy_init();

    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, drop);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    return e;
}

double
obx_bench_raw_http_post(int port, const struct curl_slist *headers, const char *body,
                        size_t body_len, int count, int in_flight)
{
    char url[64];
    CURLM *multi = curl_multi_init();
    double start = obx_bench_now();
    int started = 0, done = 0, running = 0, left;

    snprintf(url, sizeof(url), "http://127.0.0.1:%d/events", port);
    for (; started < count && started < in_flight; started++) {
        curl_multi_add_handle(multi, post(url, body, body_len, headers));
    }
    while (done < count) {
        CURLMsg *m;

        curl_multi_perform(multi, &running);
        while ((m = curl_multi_info_read(multi, &left)) != NULL) {
            CURL *e = m->easy_handle;
            CURLcode rc = m->data.result; /* m is gone once its handle is removed */
            long status = 0;

            if (m->msg != CURLMSG_DONE) {
                continue;
            }
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
            done += rc == CURLE_OK && status == 204;
            curl_multi_remove_handle(multi, e);
            if (rc != CURLE_OK || started >= count) {
                curl_easy_cleanup(e);
                count -= rc != CURLE_OK; /* not counted: a failed POST */
            } else {
                curl_multi_add_handle(multi, e); /* its connection is reused */
                started++;
            }
        }
        if (done < count) {
            curl_multi_poll(multi, NULL, 0, 100, NULL);
        }
    }
    curl_multi_cleanup(multi);
    return done / (obx_bench_now() - start);
}
