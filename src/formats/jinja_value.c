/* The Jinja subset interpreter (jinja_impl.h): values, their text and JSON,
 * variables, string helpers, iteration. */
#include "jinja_impl.h"

/* ======================================================================== */
/* values                                                                   */
/* ======================================================================== */

bool rcj_fail(ctx *C, rc_status st, const char *fmt, ...)
{
    if (C->st != RC_OK)
        return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(C->err, sizeof C->err, fmt, ap);
    va_end(ap);
    C->st = st;
    return false;
}

bool oom(ctx *C)
{
    if (C->ar.capped)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "uses more than %zu MiB of values", RC_JINJA_MAX_MEMORY >> 20);
    return rcj_fail(C, RC_ERR_NOMEM, "out of memory");
}

bool too_big(ctx *C)
{
    return rcj_fail(C, RC_ERR_UNSUPPORTED, "uses more than %zu MiB of values", RC_JINJA_MAX_MEMORY >> 20);
}

bool rcj_step(ctx *C, size_t work)
{
    C->steps += 1 + (int64_t)(work >> 6);
    if (C->steps > RC_JINJA_MAX_STEPS)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "takes more than %d steps", RC_JINJA_MAX_STEPS);
    return true;
}

void *C_alloc(ctx *C, size_t n)
{
    void *p = ar_alloc(&C->ar, n);
    if (!p)
        oom(C);
    return p;
}

void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->over || n == 0)
        return;
    if (n > b->max || b->n > b->max - n) {
        b->over = b->capped = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->over = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

jv mkstr(const char *p, size_t n)
{
    jv v = {.t = V_STR};
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}
jv mkint(int64_t i)
{
    jv v = {.t = V_INT};
    v.u.i = i;
    return v;
}
jv mkbool(bool b)
{
    jv v = {.t = V_BOOL};
    v.u.i = b;
    return v;
}
jv mkfloat(double f)
{
    jv v = {.t = V_FLOAT};
    v.u.f = f;
    return v;
}
jv undef_named(const char *p, size_t n)
{
    jv v = {.t = V_UNDEF};
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}

bool new_list(ctx *C, size_t n, jv *out, bool tup)
{
    jlist *l = C_alloc(C, sizeof *l);
    if (!l)
        return false;
    l->n = n;
    l->v = NULL;
    if (n) {
        if (n > RC_JINJA_MAX_MEMORY / sizeof(jv))
            return too_big(C);
        if (!(l->v = C_alloc(C, n * sizeof(jv))))
            return false;
    }
    out->t = V_LIST;
    out->tup = tup;
    out->u.l = l;
    return true;
}

/* a string of n bytes to fill */
char *new_str(ctx *C, size_t n, jv *out)
{
    if (n >= RC_JINJA_MAX_MEMORY) {
        too_big(C);
        return NULL;
    }
    char *p = C_alloc(C, n + 1);
    if (!p)
        return NULL;
    p[n] = '\0';
    *out = mkstr(p, n);
    return p;
}

const char *type_name(const jv *v)
{
    switch (v->t) {
    case V_UNDEF: return "undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return "str";
    case V_LIST: return v->tup ? "tuple" : "list";
    case V_DICT: return "dict";
    case V_NS: return "Namespace";
    case V_LOOP: return "LoopContext";
    case V_MACRO: return "Macro";
    default: return "function";
    }
}

bool undefined_error(ctx *C, const jv *v)
{
    if (v->u.s.p)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "'%.*s' is undefined", (int)(v->u.s.n > 60 ? 60 : v->u.s.n), v->u.s.p);
    return rcj_fail(C, RC_ERR_UNSUPPORTED, "a value is undefined");
}

bool truthy(const jv *v)
{
    switch (v->t) {
    case V_UNDEF:
    case V_NONE: return false;
    case V_BOOL:
    case V_INT: return v->u.i != 0;
    case V_FLOAT: return v->u.f != 0.0;
    case V_STR: return v->u.s.n != 0;
    case V_LIST: return v->u.l->n != 0;
    case V_DICT: return v->u.d->n != 0;
    default: return true;
    }
}

bool is_num(const jv *v) { return v->t == V_BOOL || v->t == V_INT || v->t == V_FLOAT; }
double num_f(const jv *v) { return v->t == V_FLOAT ? v->u.f : (double)v->u.i; }

/* ---- equality and order ---- */

bool dict_find(const jdict *d, const jv *k, size_t *at)
{
    for (size_t i = 0; i < d->n; i++)
        if (veq(&d->k[i], k, 0)) {
            *at = i;
            return true;
        }
    return false;
}

bool dict_find_str(const jdict *d, const char *s, size_t n, size_t *at)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == V_STR && d->k[i].u.s.n == n && !memcmp(d->k[i].u.s.p, s, n)) {
            *at = i;
            return true;
        }
    return false;
}

bool veq(const jv *a, const jv *b, int depth)
{
    if (depth > 200)
        return false;
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT)
            return a->u.i == b->u.i;
        return num_f(a) == num_f(b);
    }
    if (a->t != b->t)
        return false;
    switch (a->t) {
    case V_UNDEF:
    case V_NONE: return true;
    case V_STR: return a->u.s.n == b->u.s.n && !memcmp(a->u.s.p, b->u.s.p, a->u.s.n);
    case V_LIST:
        if (a->tup != b->tup || a->u.l->n != b->u.l->n)
            return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!veq(&a->u.l->v[i], &b->u.l->v[i], depth + 1))
                return false;
        return true;
    case V_DICT:
        if (a->u.d->n != b->u.d->n)
            return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            size_t j;
            if (!dict_find(b->u.d, &a->u.d->k[i], &j) || !veq(&a->u.d->v[i], &b->u.d->v[j], depth + 1))
                return false;
        }
        return true;
    case V_NS: return a->u.d == b->u.d;
    case V_LOOP: return a->u.lp == b->u.lp;
    default: return a->u.m.id == b->u.m.id && a->u.m.self == b->u.m.self;
    }
}

/* a < b as Python orders them: *r -1, 0, 1 */
bool vcmp(ctx *C, const jv *a, const jv *b, int *r, int depth)
{
    if (depth > 200)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "values nested too deeply to compare");
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT)
            *r = a->u.i < b->u.i ? -1 : a->u.i > b->u.i;
        else {
            double x = num_f(a), y = num_f(b);
            *r = x < y ? -1 : x > y ? 1 : 0;
        }
        return true;
    }
    if (a->t == V_STR && b->t == V_STR) {
        size_t m = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int c = memcmp(a->u.s.p, b->u.s.p, m);
        *r = c < 0 ? -1 : c > 0 ? 1 : a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
        return rcj_step(C, m);
    }
    if (a->t == V_LIST && b->t == V_LIST && a->tup == b->tup) {
        size_t m = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < m; i++) {
            if (veq(&a->u.l->v[i], &b->u.l->v[i], depth + 1))
                continue;
            return vcmp(C, &a->u.l->v[i], &b->u.l->v[i], r, depth + 1);
        }
        *r = a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
        return true;
    }
    if (a->t == V_UNDEF)
        return undefined_error(C, a);
    if (b->t == V_UNDEF)
        return undefined_error(C, b);
    return rcj_fail(C, RC_ERR_UNSUPPORTED, "cannot order a %s and a %s", type_name(a), type_name(b));
}

/* ---- text of values ---- */

static void fmt_float(double f, char *o, size_t on)
{
    if (isnan(f)) {
        snprintf(o, on, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(o, on, f < 0 ? "-inf" : "inf");
        return;
    }
    char t[48];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*e", p - 1, f);
        if (strtod(t, NULL) == f)
            break;
    }
    /* t: [-]d[.ddd]e[+-]xx */
    const char *q = t;
    bool neg = *q == '-';
    if (neg)
        q++;
    char dig[24];
    int nd = 0;
    while (*q && *q != 'e') {
        if (*q != '.' && nd < 23)
            dig[nd++] = *q;
        q++;
    }
    int ex = atoi(q + 1);
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    size_t w = 0;
    char buf[64];
    if (neg)
        buf[w++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex >= 0) {
            for (int i = 0; i <= ex; i++)
                buf[w++] = i < nd ? dig[i] : '0';
            buf[w++] = '.';
            if (nd > ex + 1)
                for (int i = ex + 1; i < nd; i++)
                    buf[w++] = dig[i];
            else
                buf[w++] = '0';
        } else {
            buf[w++] = '0';
            buf[w++] = '.';
            for (int i = 0; i < -ex - 1; i++)
                buf[w++] = '0';
            for (int i = 0; i < nd; i++)
                buf[w++] = dig[i];
        }
        buf[w] = '\0';
    } else {
        buf[w++] = dig[0];
        if (nd > 1) {
            buf[w++] = '.';
            for (int i = 1; i < nd; i++)
                buf[w++] = dig[i];
        }
        buf[w] = '\0';
        snprintf(buf + w, sizeof buf - w, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
    snprintf(o, on, "%s", buf);
}

static bool py_printable(uint32_t cp)
{
    if (cp == ' ')
        return true;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return !(c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CS ||
             c == UTF8PROC_CATEGORY_CO || c == UTF8PROC_CATEGORY_CN || c == UTF8PROC_CATEGORY_ZL ||
             c == UTF8PROC_CATEGORY_ZP || c == UTF8PROC_CATEGORY_ZS);
}

static void repr_str(sbuf *b, const char *s, size_t n)
{
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    sb_add(b, &q, 1);
    for (size_t i = 0; i < n;) {
        size_t l;
        uint32_t cp = u8_cp(s + i, n - i, &l);
        char e[12];
        if (cp == (uint32_t)q || cp == '\\') {
            e[0] = '\\';
            e[1] = (char)cp;
            sb_add(b, e, 2);
        } else if (cp == '\n')
            sb_str(b, "\\n");
        else if (cp == '\r')
            sb_str(b, "\\r");
        else if (cp == '\t')
            sb_str(b, "\\t");
        else if (!py_printable(cp)) {
            if (cp < 0x100)
                snprintf(e, sizeof e, "\\x%02x", (unsigned)cp);
            else if (cp < 0x10000)
                snprintf(e, sizeof e, "\\u%04x", (unsigned)cp);
            else
                snprintf(e, sizeof e, "\\U%08x", (unsigned)cp);
            sb_str(b, e);
        } else
            sb_add(b, s + i, l);
        i += l;
    }
    sb_add(b, &q, 1);
}

/* Python's str() (top) or repr() of a value */
static bool vtext(ctx *C, sbuf *b, const jv *v, bool top, int depth)
{
    if (depth > 200)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "values nested too deeply to print");
    if (b->over) /* past the buffer's limit: the caller reports it; printing more is wasted work */
        return true;
    if (!rcj_step(C, 0))
        return false;
    char t[64];
    switch (v->t) {
    case V_UNDEF:
        if (!top)
            return undefined_error(C, v);
        return true;
    case V_NONE: sb_str(b, "None"); return true;
    case V_BOOL: sb_str(b, v->u.i ? "True" : "False"); return true;
    case V_INT:
        snprintf(t, sizeof t, "%lld", (long long)v->u.i);
        sb_str(b, t);
        return true;
    case V_FLOAT:
        fmt_float(v->u.f, t, sizeof t);
        sb_str(b, t);
        return true;
    case V_STR:
        if (top)
            sb_add(b, v->u.s.p, v->u.s.n);
        else
            repr_str(b, v->u.s.p, v->u.s.n);
        return rcj_step(C, v->u.s.n);
    case V_LIST:
        sb_str(b, v->tup ? "(" : "[");
        for (size_t i = 0; i < v->u.l->n && !b->over; i++) {
            if (i)
                sb_str(b, ", ");
            if (!vtext(C, b, &v->u.l->v[i], false, depth + 1))
                return false;
        }
        sb_str(b, v->tup ? (v->u.l->n == 1 ? ",)" : ")") : "]");
        return true;
    case V_DICT:
    case V_NS:
        sb_str(b, v->t == V_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v->u.d->n && !b->over; i++) {
            if (i)
                sb_str(b, ", ");
            if (!vtext(C, b, &v->u.d->k[i], false, depth + 1))
                return false;
            sb_str(b, ": ");
            if (!vtext(C, b, &v->u.d->v[i], false, depth + 1))
                return false;
        }
        sb_str(b, v->t == V_NS ? "}>" : "}");
        return true;
    default: return rcj_fail(C, RC_ERR_UNSUPPORTED, "cannot print a %s", type_name(v));
    }
}

bool sb_done(ctx *C, sbuf *b, jv *out)
{
    if (b->over) {
        free(b->p);
        if (b->capped)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "makes a string of more than %zu MiB", b->max >> 20);
        return oom(C);
    }
    char *p = new_str(C, b->n, out);
    if (p && b->n)
        memcpy(p, b->p, b->n);
    free(b->p);
    return p != NULL;
}

/* str(v) appended to b (a rendering's output): stops once b is past its limit */
bool rcj_print(ctx *C, sbuf *b, const jv *v)
{
    return vtext(C, b, v, true, 0);
}

/* str(v) as a value */
bool to_str(ctx *C, const jv *v, jv *out)
{
    if (v->t == V_STR) {
        *out = *v;
        return true;
    }
    sbuf b = {.max = RC_JINJA_MAX_MEMORY};
    if (!vtext(C, &b, v, true, 0)) {
        free(b.p);
        return false;
    }
    return sb_done(C, &b, out);
}
static void json_str(sbuf *b, const char *s, size_t n, bool ascii)
{
    sb_str(b, "\"");
    for (size_t i = 0; i < n;) {
        size_t l;
        uint32_t cp = u8_cp(s + i, n - i, &l);
        char e[16];
        if (cp == '"')
            sb_str(b, "\\\"");
        else if (cp == '\\')
            sb_str(b, "\\\\");
        else if (cp == '\n')
            sb_str(b, "\\n");
        else if (cp == '\r')
            sb_str(b, "\\r");
        else if (cp == '\t')
            sb_str(b, "\\t");
        else if (cp == '\b')
            sb_str(b, "\\b");
        else if (cp == '\f')
            sb_str(b, "\\f");
        else if (cp < 0x20 || (ascii && cp > 0x7e)) {
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", (unsigned)(0xd800 | (v >> 10)), (unsigned)(0xdc00 | (v & 0x3ff)));
            } else
                snprintf(e, sizeof e, "\\u%04x", (unsigned)cp);
            sb_str(b, e);
        } else
            sb_add(b, s + i, l);
        i += l;
    }
    sb_str(b, "\"");
}

static void json_nl(sbuf *b, const jopt *o, int level)
{
    sb_str(b, "\n");
    for (int i = 0; i < level; i++)
        sb_add(b, o->ind, o->indn);
}

bool vjson(ctx *C, sbuf *b, const jv *v, const jopt *o, int depth)
{
    if (depth > 200)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "values nested too deeply for tojson");
    if (!rcj_step(C, 0))
        return false;
    char t[64];
    switch (v->t) {
    case V_NONE: sb_str(b, "null"); return true;
    case V_BOOL: sb_str(b, v->u.i ? "true" : "false"); return true;
    case V_INT:
        snprintf(t, sizeof t, "%lld", (long long)v->u.i);
        sb_str(b, t);
        return true;
    case V_FLOAT:
        if (isnan(v->u.f))
            sb_str(b, "NaN");
        else if (isinf(v->u.f))
            sb_str(b, v->u.f < 0 ? "-Infinity" : "Infinity");
        else {
            fmt_float(v->u.f, t, sizeof t);
            sb_str(b, t);
        }
        return true;
    case V_STR: json_str(b, v->u.s.p, v->u.s.n, o->ascii); return rcj_step(C, v->u.s.n);
    case V_LIST:
        if (!v->u.l->n) {
            sb_str(b, "[]");
            return true;
        }
        sb_str(b, "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i)
                sb_add(b, o->isep, o->isepn);
            if (o->indent)
                json_nl(b, o, depth + 1);
            if (!vjson(C, b, &v->u.l->v[i], o, depth + 1))
                return false;
        }
        if (o->indent)
            json_nl(b, o, depth);
        sb_str(b, "]");
        return true;
    case V_DICT: {
        const jdict *d = v->u.d;
        if (!d->n) {
            sb_str(b, "{}");
            return true;
        }
        size_t *ord = malloc(d->n * sizeof *ord);
        if (!ord)
            return rcj_fail(C, RC_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < d->n; i++)
            ord[i] = i;
        bool ok = true;
        if (o->sort) /* insertion sort of the keys (strings) */
            for (size_t i = 1; i < d->n && ok; i++)
                for (size_t j = i; j > 0 && ok; j--) {
                    int r;
                    ok = vcmp(C, &d->k[ord[j - 1]], &d->k[ord[j]], &r, depth + 1);
                    if (!ok || r <= 0)
                        break;
                    size_t x = ord[j];
                    ord[j] = ord[j - 1];
                    ord[j - 1] = x;
                }
        if (ok)
            sb_str(b, "{");
        for (size_t i = 0; i < d->n && ok; i++) {
            const jv *k = &d->k[ord[i]];
            if (i)
                sb_add(b, o->isep, o->isepn);
            if (o->indent)
                json_nl(b, o, depth + 1);
            if (k->t == V_STR)
                json_str(b, k->u.s.p, k->u.s.n, o->ascii);
            else if (k->t == V_INT || k->t == V_BOOL || k->t == V_NONE || k->t == V_FLOAT) {
                sbuf kb = {.max = 64};
                if (k->t == V_INT || k->t == V_FLOAT)
                    ok = vtext(C, &kb, k, true, depth + 1);
                else
                    sb_str(&kb, k->t == V_NONE ? "null" : k->u.i ? "true" : "false");
                if (ok)
                    json_str(b, kb.p ? kb.p : "", kb.n, o->ascii);
                free(kb.p);
            } else
                ok = rcj_fail(C, RC_ERR_UNSUPPORTED, "tojson: a %s key", type_name(k));
            sb_add(b, o->ksep, o->ksepn);
            if (ok)
                ok = vjson(C, b, &d->v[ord[i]], o, depth + 1);
        }
        free(ord);
        if (!ok)
            return false;
        if (o->indent)
            json_nl(b, o, depth);
        sb_str(b, "}");
        return true;
    }
    case V_UNDEF: return rcj_fail(C, RC_ERR_UNSUPPORTED, "tojson of an undefined value");
    default: return rcj_fail(C, RC_ERR_UNSUPPORTED, "tojson of a %s", type_name(v));
    }
}

/* ---- JSON input to values ---- */

bool from_json(ctx *C, const json_t *j, jv *out, int depth)
{
    if (depth > 200)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "a variable nested too deeply");
    switch (json_typeof(j)) {
    case JSON_STRING: *out = mkstr(json_string_value(j), json_string_length(j)); return true;
    case JSON_INTEGER: *out = mkint((int64_t)json_integer_value(j)); return true;
    case JSON_REAL: *out = mkfloat(json_real_value(j)); return true;
    case JSON_TRUE: *out = mkbool(true); return true;
    case JSON_FALSE: *out = mkbool(false); return true;
    case JSON_NULL: *out = k_none; return true;
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (!new_list(C, n, out, false))
            return false;
        for (size_t i = 0; i < n; i++)
            if (!from_json(C, json_array_get(j, i), &out->u.l->v[i], depth + 1))
                return false;
        return rcj_step(C, 0);
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(j);
        jdict *d = C_alloc(C, sizeof *d);
        if (!d)
            return false;
        d->n = 0;
        d->cap = n;
        d->k = n ? C_alloc(C, n * sizeof(jv)) : NULL;
        d->v = n ? C_alloc(C, n * sizeof(jv)) : NULL;
        if (n && (!d->k || !d->v))
            return false;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val)
        {
            d->k[d->n] = mkstr(key, strlen(key));
            if (!from_json(C, val, &d->v[d->n], depth + 1))
                return false;
            d->n++;
        }
        out->t = V_DICT;
        out->u.d = d;
        return rcj_step(C, 0);
    }
    }
    return rcj_fail(C, RC_ERR_INTERNAL, "a JSON value of an unknown type");
}

/* ---- variables ---- */

bool var_lookup(const ctx *C, const char *s, size_t n, jv *out)
{
    for (size_t i = C->nv; i-- > 0;) {
        if (i < C->gap_hi && i >= C->gap_lo) { /* a macro's caller's frames */
            if (C->gap_lo == 0)
                break;
            i = C->gap_lo;
            continue;
        }
        if (C->vars[i].len == n && !memcmp(C->vars[i].name, s, n)) {
            *out = C->vars[i].v;
            return true;
        }
    }
    return false;
}

bool var_set(ctx *C, const char *s, size_t n, const jv *v)
{
    for (size_t i = C->nv; i-- > C->base;)
        if (C->vars[i].len == n && !memcmp(C->vars[i].name, s, n)) {
            C->vars[i].v = *v;
            return true;
        }
    if (C->nv == C->cv) {
        size_t c = C->cv ? 2 * C->cv : 64;
        var *q = realloc(C->vars, c * sizeof *q);
        if (!q)
            return rcj_fail(C, RC_ERR_NOMEM, "out of memory");
        C->vars = q;
        C->cv = c;
    }
    C->vars[C->nv].name = s;
    C->vars[C->nv].len = n;
    C->vars[C->nv].v = *v;
    C->nv++;
    if (C->frames == 0)
        C->root_n = C->nv;
    return true;
}

/* ---- string helpers (code points) ---- */

/* the byte offsets of code points: off[0..cnt], off[cnt] = n */
size_t *cp_offsets(ctx *C, const char *s, size_t n, size_t *cnt)
{
    size_t c = u8_count(s, n);
    size_t *off = C_alloc(C, (c + 1) * sizeof *off);
    if (!off)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xc0) != 0x80)
            off[k++] = i;
    off[k] = n;
    *cnt = c;
    return off;
}

static bool in_chars(const char *set, size_t sn, uint32_t cp)
{
    for (size_t i = 0; i < sn;) {
        size_t l;
        if (u8_cp(set + i, sn - i, &l) == cp)
            return true;
        i += l;
    }
    return false;
}

/* strip: which 1 left, 2 right, 3 both; chars NULL: whitespace */
jv vstrip(const jv *s, int which, const char *chars, size_t cn)
{
    const char *p = s->u.s.p;
    size_t b = 0, e = s->u.s.n;
    if (which & 1)
        while (b < e) {
            size_t l;
            uint32_t cp = u8_cp(p + b, e - b, &l);
            if (chars ? !in_chars(chars, cn, cp) : !py_space(cp))
                break;
            b += l;
        }
    if (which & 2)
        while (e > b) {
            size_t pb = u8_prev(p, e), l;
            uint32_t cp = u8_cp(p + pb, e - pb, &l);
            if (chars ? !in_chars(chars, cn, cp) : !py_space(cp))
                break;
            e = pb;
        }
    return mkstr(p + b, e - b);
}

/* case mapping: 1 upper, 2 lower, 3 title, 4 capitalize */
bool vcase(ctx *C, const jv *s, int how, jv *out)
{
    size_t n = s->u.s.n;
    const char *p = s->u.s.p;
    sbuf b = {.max = RC_JINJA_MAX_MEMORY};
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < n;) {
        size_t l;
        uint32_t cp = u8_cp(p + i, n - i, &l);
        if (cp == 0xdf || (cp >= 0xfb00 && cp <= 0xfb17) || cp == 0x130 || cp == 0x149 || cp == 0x1f0 || cp == 0x390 ||
            cp == 0x3b0 || cp == 0x587 || (cp >= 0x1e96 && cp <= 0x1e9a) || (cp >= 0x1f50 && cp <= 0x1ffc && how != 2)) {
            free(b.p);
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "changes the case of U+%04X, whose case mapping ratiocheck does not implement",
                        (unsigned)cp);
        }
        uint32_t up = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp), lo = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
        bool cased = up != cp || lo != cp || utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_LT;
        uint32_t r = cp;
        if (how == 1)
            r = up;
        else if (how == 2)
            r = lo;
        else if (how == 3)
            r = prev_cased ? lo : (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp);
        else
            r = first ? (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp) : lo;
        if (how == 3)
            prev_cased = cased;
        first = false;
        char e[4];
        sb_add(&b, e, u8_put(e, r));
        i += l;
    }
    return rcj_step(C, n) && sb_done(C, &b, out);
}

bool vconcat(ctx *C, const char *a, size_t an, const char *b, size_t bn, jv *out)
{
    if (an > RC_JINJA_MAX_MEMORY || bn > RC_JINJA_MAX_MEMORY - an)
        return too_big(C);
    char *p = new_str(C, an + bn, out);
    if (!p)
        return false;
    if (an)
        memcpy(p, a, an);
    if (bn)
        memcpy(p + an, b, bn);
    return rcj_step(C, an + bn);
}

const char *find_sub(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn == 0)
        return h;
    if (nn > hn)
        return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && !memcmp(h + i, nd, nn))
            return h + i;
    return NULL;
}

/* ---- iteration ---- */

/* the items a for loop (or a filter) sees */
bool to_items(ctx *C, const jv *v, jlist **out)
{
    static jlist empty = {0, NULL};
    switch (v->t) {
    case V_UNDEF: *out = &empty; return true;
    case V_LIST: *out = v->u.l; return true;
    case V_DICT: {
        jv l;
        if (!new_list(C, v->u.d->n, &l, false))
            return false;
        for (size_t i = 0; i < v->u.d->n; i++)
            l.u.l->v[i] = v->u.d->k[i];
        *out = l.u.l;
        return true;
    }
    case V_STR: {
        size_t cnt, *off = cp_offsets(C, v->u.s.p, v->u.s.n, &cnt);
        jv l;
        if (!off || !new_list(C, cnt, &l, false))
            return false;
        for (size_t i = 0; i < cnt; i++)
            l.u.l->v[i] = mkstr(v->u.s.p + off[i], off[i + 1] - off[i]);
        *out = l.u.l;
        return rcj_step(C, v->u.s.n);
    }
    default: return rcj_fail(C, RC_ERR_UNSUPPORTED, "a %s is not iterable", type_name(v));
    }
}
