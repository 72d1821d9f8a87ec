/* SPDX-License-Identifier: MIT */
/*
 * uri_reference.h - RFC 3986's URI-reference grammar, checked without I/O.
 *
 * CloudEvents' `source` must be a URI-reference: SDKs refuse an event
 * whose source is not one (the JavaScript SDK validates it with a
 * uri-reference format), so a value that breaks the grammar would make
 * every published message unreadable. Checked once, when the setting is
 * read.
 */
#ifndef OBX_URI_REFERENCE_H
#define OBX_URI_REFERENCE_H

#include "outbox/outbox.h"

/*
 * OUTBOX_OK when `text` is a URI-reference (RFC 3986 section 4.1): an
 * absolute URI or a relative reference, only ASCII, every '%' followed by
 * two hex digits, '[' and ']' only around an IP literal host, a first
 * relative segment without ':'. The empty string is one. Otherwise
 * OUTBOX_EINVAL with `err` saying which byte breaks it, at which offset.
 */
outbox_status obx_uri_reference_check(const char *text, outbox_error *err);

#endif
