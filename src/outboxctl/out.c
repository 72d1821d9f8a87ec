/* SPDX-License-Identifier: MIT */
/*
 * out.c - printing records as JSON lines or key=value lines (see out.h).
 */
#include "out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/banned.h" /* last: poisons unsafe functions */

const char *
obx_ctl_text(json_t *obj, const char *key, char *buf, size_t cap)
{
    json_t *v = json_object_get(obj, key);
    char *dumped;

    if (v == NULL || json_is_null(v)) {
        snprintf(buf, cap, "-");
    } else if (json_is_string(v)) {
        snprintf(buf, cap, "%s", json_string_value(v));
    } else if (json_is_array(v) && cap > 0) {
        size_t used = 0, i;
        json_t *item;

        buf[0] = '\0';
        json_array_foreach(v, i, item)
        {
            const char *text = json_is_string(item) ? json_string_value(item) : "?";

            if (used < cap) {
                used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? "," : "", text);
            }
        }
    } else {
        dumped = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(buf, cap, "%s", dumped != NULL ? dumped : "?");
        free(dumped);
    }
    return buf;
}

long long
obx_ctl_int(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);

    return json_is_integer(v) ? (long long)json_integer_value(v)
           : json_is_real(v)  ? (long long)json_real_value(v)
                              : 0;
}

const char *
obx_ctl_str(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* A value logfmt reads back as it is: no blank, quote, backslash, '=' or control byte. */
static int
plain_word(const char *text)
{
    if (text[0] == '\0') {
        return 0;
    }
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
        if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p == 0x7f) {
            return 0;
        }
    }
    return 1;
}

/* A field of a text line: a value that could end its field or line is quoted and escaped. */
static void
print_pair(const char *key, json_t *obj)
{
    char buf[2048];
    const char *text = obx_ctl_text(obj, key, buf, sizeof(buf));

    if (plain_word(text)) {
        printf(" %s=%s", key, text);
        return;
    }
    fputc(' ', stdout);
    fputs(key, stdout);
    fputs("=\"", stdout);
    for (const char *p = text; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;

        if (c == '"' || c == '\\') {
            printf("\\%c", c);
        } else if (c == '\n' || c == '\r' || c == '\t') {
            printf("\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
        } else if (c < 0x20 || c == 0x7f) {
            printf("\\u%04x", c);
        } else {
            fputc(c, stdout);
        }
    }
    fputc('"', stdout);
}

void
obx_ctl_emit(int json, const char *kind, json_t *obj, const char *const *keys)
{
    const char *key;
    json_t *value;

    if (json) {
        json_t *line = json_pack("{s:s}", "kind", kind);

        json_object_update(line, obj);
        json_dumpf(line, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(line);
        return;
    }
    fputs(kind, stdout);
    if (keys != NULL) {
        for (size_t i = 0; keys[i] != NULL; i++) {
            print_pair(keys[i], obj);
        }
    } else {
        json_object_foreach(obj, key, value)
        {
            (void)value;
            print_pair(key, obj);
        }
    }
    fputc('\n', stdout);
}
