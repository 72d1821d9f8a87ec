/* SPDX-License-Identifier: MIT */
/*
 * libfuzzer_entry.c - libFuzzer's entry for one target, chosen at build
 * time: compiled once per target with -DOBX_FUZZ_ENTRY=obx_fuzz_<name>.
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return OBX_FUZZ_ENTRY(data, size);
}
