#include "json_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

bool rc_utf8_valid(const unsigned char *s, size_t len, size_t *bad_at)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3;
            cp = c & 0x07;
        } else {
            goto bad;
        }
        if (len - i <= n) /* truncated sequence */
            goto bad;
        for (size_t k = 1; k <= n; k++) {
            unsigned cc = s[i + k];
            if ((cc & 0xc0) != 0x80)
                goto bad;
            cp = (cp << 6) | (cc & 0x3f);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            goto bad;
        i += n + 1;
        continue;
    bad:
        if (bad_at)
            *bad_at = i;
        return false;
    }
    return true;
}

rc_status rc_json_parse_object(const char *buf, size_t len, const char *what, json_t **out)
{
    return rc_json_parse_object_flags(buf, len, what, 0, out);
}

rc_status rc_json_parse_object_flags(const char *buf, size_t len, const char *what, size_t flags, json_t **out)
{
    json_error_t err;
    *out = NULL;
    size_t bad;
    if (!rc_utf8_valid((const unsigned char *)buf, len, &bad))
        return rc_errorf(RC_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu", what, bad);
    json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES | flags, &err);
    if (!j)
        return rc_errorf(RC_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", what, err.line,
                         err.column, err.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return rc_errorf(RC_ERR_FORMAT, "%s: top level is not a JSON object", what);
    }
    *out = j;
    return RC_OK;
}

rc_status rc_json_load_object(const char *path, size_t max_len, json_t **out)
{
    return rc_json_load_object_flags(path, max_len, 0, out);
}

rc_status rc_json_load_object_flags(const char *path, size_t max_len, size_t flags, json_t **out)
{
    char *buf;
    size_t len;
    *out = NULL;
    RC_TRY(rc_read_file(path, &buf, &len, max_len));
    rc_status st = rc_json_parse_object_flags(buf, len, path, flags, out);
    free(buf);
    return st;
}

static const json_t *lookup(const json_t *obj, const char *key, bool *present)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (present)
            *present = false;
        return NULL;
    }
    if (present)
        *present = true;
    return v;
}

rc_status rc_json_get_int(const json_t *obj, const char *key, const char *file, int64_t min,
                          int64_t max, int64_t def, int64_t *out, bool *present)
{
    const json_t *v = lookup(obj, key, present);
    if (!v) {
        *out = def;
        return RC_OK;
    }
    int64_t x;
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        /* 4.0 is integral; 4.5 and 1e300 are not */
        if (!(d == floor(d)) || d < -9.2e18 || d > 9.2e18)
            return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" must be an integer, got %g", file, key, d);
        x = (int64_t)d;
    } else {
        return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" must be an integer", file, key);
    }
    if (x < min || x > max)
        return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" = %lld is out of range [%lld, %lld]", file, key,
                         (long long)x, (long long)min, (long long)max);
    *out = x;
    return RC_OK;
}

rc_status rc_json_get_num(const json_t *obj, const char *key, const char *file, double min,
                          double max, double def, double *out, bool *present)
{
    const json_t *v = lookup(obj, key, present);
    if (!v) {
        *out = def;
        return RC_OK;
    }
    if (!json_is_number(v))
        return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" must be a number", file, key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < min || d > max)
        return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" = %g is out of range [%g, %g]", file, key, d,
                         min, max);
    *out = d;
    return RC_OK;
}

rc_status rc_json_get_bool(const json_t *obj, const char *key, const char *file, bool def,
                           bool *out, bool *present)
{
    const json_t *v = lookup(obj, key, present);
    if (!v) {
        *out = def;
        return RC_OK;
    }
    if (!json_is_boolean(v))
        return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" must be true or false", file, key);
    *out = json_is_true(v);
    return RC_OK;
}

rc_status rc_json_get_str(const json_t *obj, const char *key, const char *file, const char *def,
                          const char **out, bool *present)
{
    const json_t *v = lookup(obj, key, present);
    if (!v) {
        *out = def;
        return RC_OK;
    }
    if (!json_is_string(v))
        return rc_errorf(RC_ERR_FORMAT, "%s: \"%s\" must be a string", file, key);
    *out = json_string_value(v);
    return RC_OK;
}
