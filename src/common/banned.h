/* SPDX-License-Identifier: MIT */
/*
 * banned.h - functions that invite overflows or hidden global state.
 *
 * Included last in every .c file of ours, so a use fails to compile.
 * Use snprintf, memcpy with a checked length, strtol, and the _r time
 * functions instead.
 */
#ifndef OBX_BANNED_H
#define OBX_BANNED_H

#pragma GCC poison sprintf vsprintf strcpy strcat strncpy strncat strtok atoi atol atoll gets
#pragma GCC poison gmtime localtime ctime asctime

#endif
