/* SPDX-License-Identifier: MIT */
/*
 * config_help.c - the settings table as people read it: --help and the
 * settings reference (docs/reference/settings.md), both printed from the rows.
 */
#include "config.h"

#include <stdio.h>

#include "common/banned.h" /* last: poisons unsafe functions */

static const char *
type_text(const struct obx_setting *s, char *buf, size_t cap)
{
    if (s->type == OBX_SETTING_CHOICE) {
        return s->choices;
    }
    if (s->type == OBX_SETTING_INT) {
        snprintf(buf, cap, "%lld..%lld", s->min, s->max);
        return buf;
    }
    return "text";
}

void
obx_config_print_help(FILE *out, unsigned parts)
{
    char flag[64], range[64];

    fputs("Settings (environment variable, or --flag; flags win):\n", out);
    for (size_t i = 0; i < obx_settings_count; i++) {
        const struct obx_setting *s = &obx_settings[i];

        if ((s->parts & parts) == 0) {
            continue;
        }
        obx_setting_flag(s, flag, sizeof(flag));
        fprintf(out, "  %-32s --%-28s default: %s (%s)\n      %s\n", s->env, flag,
                s->fallback ? s->fallback : "(unset)", type_text(s, range, sizeof(range)), s->help);
    }
}

/* "relay, consumer": who reads the setting. */
static const char *
parts_text(unsigned parts, char *buf, size_t cap)
{
    static const struct {
        unsigned part;
        const char *name;
    } names[] = {{OBX_FOR_WRITER, "writer"},
                 {OBX_FOR_RELAY, "relay"},
                 {OBX_FOR_CONSUMER, "consumer"},
                 {OBX_FOR_PROGRAM, "daemon"}};
    size_t w = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if ((parts & names[i].part) != 0 && w < cap) {
            w += (size_t)snprintf(buf + w, cap - w, "%s%s", w ? ", " : "", names[i].name);
        }
    }
    return buf;
}

/*
 * One cell's text: a '|' would end the cell and shift the rest of the row
 * (choices such as "mark|prune"), so it is written "\|", which Markdown
 * shows as '|', also inside `code`.
 */
static void
put_cell(FILE *out, const char *text)
{
    for (const char *p = text; *p != '\0'; p++) {
        if (*p == '|') {
            fputc('\\', out);
        }
        fputc(*p, out);
    }
}

void
obx_config_print_markdown(FILE *out)
{
    char key[64], range[64], parts[64];

    fputs("| Variable | Key | Default | Values | Read by | Meaning |\n"
          "|---|---|---|---|---|---|\n",
          out);
    for (size_t i = 0; i < obx_settings_count; i++) {
        const struct obx_setting *s = &obx_settings[i];

        obx_setting_key(s, key, sizeof(key));
        fputs("| `", out);
        put_cell(out, s->env);
        fputs("` | `", out);
        put_cell(out, key);
        fputs(s->fallback ? "` | `" : "` | ", out);
        put_cell(out, s->fallback ? s->fallback : "(unset)");
        fputs(s->fallback ? "` | " : " | ", out);
        put_cell(out, type_text(s, range, sizeof(range)));
        fputs(" | ", out);
        put_cell(out, parts_text(s->parts, parts, sizeof(parts)));
        fputs(" | ", out);
        put_cell(out, s->help);
        fputs(" |\n", out);
    }
}
