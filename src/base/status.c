#include "status.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char g_msg[1024];

/* Messages are one line and safe on a terminal: control characters from
 * file contents (C0, DEL, the C1 controls U+0080..U+009F) and bytes that are
 * not UTF-8 become '?', byte for byte. */
static void sanitize(char *m)
{
    unsigned char *p = (unsigned char *)m;
    while (*p) {
        int n = rc_utf8_seq_len(p);
        if (n == 0 || *p < 0x20 || *p == 0x7f || (n == 2 && p[0] == 0xC2 && p[1] < 0xA0)) {
            for (int i = 0; i < (n ? n : 1); i++)
                p[i] = '?';
            p += n ? n : 1;
        } else {
            p += n;
        }
    }
}

rc_status rc_errorf(rc_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    sanitize(g_msg);
    return st;
}

rc_status rc_error_prefix(rc_status st, const char *fmt, ...)
{
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t pl = strlen(prefix), ml = strlen(g_msg);
    if (pl + 2 >= sizeof g_msg)
        return st;
    if (pl + 2 + ml >= sizeof g_msg)
        ml = sizeof g_msg - pl - 3;
    memmove(g_msg + pl + 2, g_msg, ml);
    g_msg[pl + 2 + ml] = '\0';
    memcpy(g_msg, prefix, pl);
    g_msg[pl] = ':';
    g_msg[pl + 1] = ' ';
    sanitize(g_msg);
    return st;
}

const char *rc_last_error(void) { return g_msg[0] ? g_msg : "unknown error"; }

void rc_clear_error(void) { g_msg[0] = '\0'; }

const char *rc_status_name(rc_status st)
{
    switch (st) {
    case RC_OK: return "ok";
    case RC_ERR_USAGE: return "usage error";
    case RC_ERR_GATE: return "threshold exceeded";
    case RC_ERR_FORMAT: return "malformed input";
    case RC_ERR_UNSUPPORTED: return "unsupported";
    case RC_ERR_IO: return "I/O error";
    case RC_ERR_NOMEM: return "out of memory";
    case RC_ERR_DEVICE: return "device error";
    case RC_ERR_INTERNAL: return "internal error";
    case RC_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown status";
}

int rc_exit_code(rc_status st)
{
    switch (st) {
    case RC_OK: return 0;
    case RC_ERR_USAGE: return 2;
    case RC_ERR_GATE: return 3;
    case RC_ERR_FORMAT: return 4;
    case RC_ERR_UNSUPPORTED: return 5;
    case RC_ERR_IO: return 6;
    case RC_ERR_NOMEM: return 7;
    case RC_ERR_DEVICE: return 8;
    case RC_ERR_INTERRUPTED: return 130;
    case RC_ERR_INTERNAL: break;
    }
    return 1;
}

/* Length (1..4) of the well-formed UTF-8 sequence at s (RFC 3629: no
 * overlongs, no surrogates, nothing above U+10FFFF), or 0 if ill-formed.
 * Never reads past a NUL. */
int rc_utf8_seq_len(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        if (s[1] < lo || s[1] > hi)
            return 0;
        return (s[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        if (s[1] < lo || s[1] > hi)
            return 0;
        if ((s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        return 4;
    }
    return 0;
}
