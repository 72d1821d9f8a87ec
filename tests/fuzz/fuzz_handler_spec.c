/* SPDX-License-Identifier: MIT */
/*
 * fuzz_handler_spec.c - a handler spec (NAME[@FILTER]=sql:... or exec:...)
 * from outboxd's flags or OUTBOX_HANDLER_n, and its filter matched against
 * a subject.
 *
 * Input: the spec, then after a NUL byte the subject to match. A refused
 * spec gets the same message with its passwords blanked: the message never
 * shows one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "envelope/subject.h"
#include "fuzz.h"
#include "outboxd/handler_spec.h"

int
obx_fuzz_handler_spec(const uint8_t *data, size_t size)
{
    char *text = obx_fuzz_cstr(data, size);
    size_t spec_len = strlen(text);
    const char *subject = spec_len < size ? text + spec_len + 1 : "events.order.created";
    struct obx_handler_spec spec = {0};
    outbox_error err = {0};

    if (obx_handler_spec_parse(text, &spec, &err) == OUTBOX_OK) {
        obx_fuzz_require(spec.name[0] != '\0' && strlen(spec.name) <= 64,
                         "a parsed handler has no name or a long one");
        obx_fuzz_require(spec.body != NULL && spec.body[strspn(spec.body, " \t\r\n")] != '\0',
                         "a parsed handler has an empty body");
        obx_fuzz_require(spec.kind == OBX_SPEC_SQL || spec.kind == OBX_SPEC_EXEC,
                         "a parsed handler has no kind");
        if (spec.filter != NULL) {
            (void)obx_subject_matches(spec.filter, subject);
        }
        obx_handler_spec_fini(&spec);
    } else {
        struct obx_handler_spec other = {0};
        outbox_error err2 = {0};
        char *blanked = obx_fuzz_cstr(data, size);

        obx_fuzz_require(err.message[0] != '\0', "a refused handler spec has no reason");
        if (obx_fuzz_blank_passwords(blanked, spec_len) > 0) {
            obx_fuzz_require(obx_handler_spec_parse(blanked, &other, &err2) != OUTBOX_OK &&
                                 strcmp(err.message, err2.message) == 0,
                             "a password in a refused handler spec shows in its message");
        }
        free(blanked);
    }
    free(text);
    return 0;
}
