/* SPDX-License-Identifier: MIT */
/*
 * test_bus_body_limit.c - the one rule by which the relay leases a body and
 * the bus sends it: max_payload less the header budget, or half of a
 * max_payload too small for the budget - never zero, never more than fits.
 */
#include <criterion/criterion.h>

#include "bus/bus.h"

#include "common/banned.h" /* last: poisons unsafe functions */

Test(bus_body_limit, keeps_the_header_budget_out_of_a_normal_max_payload)
{
    cr_assert_eq(obx_bus_body_limit(1024 * 1024), 1024 * 1024 - OBX_BUS_HEADER_BUDGET);
    cr_assert_eq(obx_bus_body_limit(8 * 1024 + 1), 8 * 1024 + 1 - OBX_BUS_HEADER_BUDGET);
}

Test(bus_body_limit, leaves_half_of_a_small_max_payload_to_the_body)
{
    cr_assert_eq(obx_bus_body_limit(8 * 1024), 4 * 1024);
    cr_assert_eq(obx_bus_body_limit(4096), 2048, "a body must still fit below the header budget");
    cr_assert_eq(obx_bus_body_limit(1000), 500);
}
