/* SPDX-License-Identifier: MIT */
/*
 * fuzz.h - the fuzz targets: one entry per parser of untrusted input.
 *
 * Each entry takes one input and returns 0. It aborts (a crash to the
 * fuzzer) when the parser breaks memory safety or an invariant the entry
 * checks. libfuzzer_entry.c makes one of them a libFuzzer target;
 * replay.c runs every one on its corpus and regression inputs, without
 * libFuzzer, as an ordinary unit test.
 */
#ifndef OBX_FUZZ_H
#define OBX_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int obx_fuzz_envelope(const uint8_t *data, size_t size);
int obx_fuzz_message(const uint8_t *data, size_t size);
int obx_fuzz_fleet_file(const uint8_t *data, size_t size);
int obx_fuzz_handler_spec(const uint8_t *data, size_t size);
int obx_fuzz_url_list(const uint8_t *data, size_t size);
int obx_fuzz_setting(const uint8_t *data, size_t size);
int obx_fuzz_nkey(const uint8_t *data, size_t size);
int obx_fuzz_secret_file(const uint8_t *data, size_t size);

/* `data` as a malloc'd C string: a NUL inside ends it, as it would for any C caller. */
char *obx_fuzz_cstr(const uint8_t *data, size_t size);

/*
 * `data` as the content of an anonymous file (memfd), for parsers that read
 * a path: its "/proc/self/fd/N" into `path`. Returns the descriptor to
 * close afterwards.
 */
int obx_fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t cap);

/*
 * Overwrites with 'x' every password in `text` (len bytes) that plainly is
 * one: an alphanumeric password=... value, or the alphanumeric password
 * of scheme://user:...@. Returns how many (none in text holding the mask,
 * "***", which messages hide on their own). A parser that masks secrets
 * must answer the blanked text exactly as the original: otherwise some of
 * the password shows.
 */
size_t obx_fuzz_blank_passwords(char *text, size_t len);

/* Aborts, naming `what`, unless `ok`: a broken invariant is a crash to the fuzzer. */
void obx_fuzz_require(int ok, const char *what);

#endif
