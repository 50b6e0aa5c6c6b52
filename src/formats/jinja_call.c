/* The Jinja subset interpreter (jinja_impl.h): items and attributes, call
 * arguments, methods, functions, tests and filters. */
#include "jinja_impl.h"

/* ======================================================================== */
/* evaluation                                                               */
/* ======================================================================== */

/* obj[key] as jinja2's environment.getitem */
bool getitem_v(ctx *C, const jv *o, const jv *k, jv *r)
{
    if (o->t == V_UNDEF)
        return undefined_error(C, o);
    if ((o->t == V_LIST || o->t == V_STR) && (k->t == V_INT || k->t == V_BOOL)) {
        int64_t i = k->u.i;
        if (o->t == V_LIST) {
            int64_t n = (int64_t)o->u.l->n;
            if (i < 0)
                i += n;
            *r = i >= 0 && i < n ? o->u.l->v[i] : k_undef;
            return true;
        }
        size_t cnt = u8_count(o->u.s.p, o->u.s.n);
        if (!rcj_step(C, o->u.s.n))
            return false;
        if (i < 0)
            i += (int64_t)cnt;
        if (i < 0 || i >= (int64_t)cnt) {
            *r = k_undef;
            return true;
        }
        if (cnt == o->u.s.n) { /* ASCII */
            *r = mkstr(o->u.s.p + i, 1);
            return true;
        }
        size_t *off = cp_offsets(C, o->u.s.p, o->u.s.n, &cnt);
        if (!off)
            return false;
        *r = mkstr(o->u.s.p + off[i], off[i + 1] - off[i]);
        return true;
    }
    if (o->t == V_DICT) {
        size_t at;
        if (!rcj_step(C, o->u.d->n << 6))
            return false;
        if (dict_find(o->u.d, k, &at)) {
            *r = o->u.d->v[at];
            return true;
        }
    }
    if (k->t == V_STR && o->t != V_DICT)
        return getattr_v(C, o, k->u.s.p, k->u.s.n, r);
    if (k->t == V_STR) { /* a dict without the key: its methods */
        int m = FIND(k_methods, k->u.s.p, k->u.s.n);
        if (m >= M_ITEMS) {
            jv *self = C_alloc(C, sizeof *self);
            if (!self)
                return false;
            *self = *o;
            r->t = V_METHOD;
            r->u.m.id = 100 + m;
            r->u.m.self = self;
            return true;
        }
        *r = undef_named(k->u.s.p, k->u.s.n);
        return true;
    }
    *r = k_undef;
    return true;
}

/* obj.name as jinja2's environment.getattr (sandboxed: no "_" names) */
bool getattr_v(ctx *C, const jv *o, const char *s, size_t n, jv *r)
{
    if (o->t == V_UNDEF)
        return undefined_error(C, o);
    *r = undef_named(s, n);
    if (n && s[0] == '_')
        return true;
    int m = FIND(k_methods, s, n);
    if ((o->t == V_STR && m >= 0 && m < M_ITEMS) || (o->t == V_DICT && m >= M_ITEMS)) {
        jv *self = C_alloc(C, sizeof *self);
        if (!self)
            return false;
        *self = *o;
        r->t = V_METHOD;
        r->u.m.id = 100 + m;
        r->u.m.self = self;
        return true;
    }
    if (o->t == V_DICT || o->t == V_NS) {
        size_t at;
        if (!rcj_step(C, o->u.d->n << 6))
            return false;
        if (dict_find_str(o->u.d, s, n, &at))
            *r = o->u.d->v[at];
        return true;
    }
    if (o->t == V_LOOP) {
        const jloop *L = o->u.lp;
        if (sn_is(s, n, "index"))
            *r = mkint(L->i + 1);
        else if (sn_is(s, n, "index0"))
            *r = mkint(L->i);
        else if (sn_is(s, n, "revindex"))
            *r = mkint(L->n - L->i);
        else if (sn_is(s, n, "revindex0"))
            *r = mkint(L->n - L->i - 1);
        else if (sn_is(s, n, "first"))
            *r = mkbool(L->i == 0);
        else if (sn_is(s, n, "last"))
            *r = mkbool(L->i == L->n - 1);
        else if (sn_is(s, n, "length"))
            *r = mkint(L->n);
        else if (sn_is(s, n, "depth"))
            *r = mkint(1);
        else if (sn_is(s, n, "depth0"))
            *r = mkint(0);
        else if (sn_is(s, n, "previtem")) {
            if (L->i > 0)
                *r = L->items->v[L->i - 1];
        } else if (sn_is(s, n, "nextitem")) {
            if (L->i + 1 < L->n)
                *r = L->items->v[L->i + 1];
        }
        return true;
    }
    return true;
}
bool eval_args(ctx *C, const node *x, args *a, size_t skip)
{
    a->np = a->nkw = 0;
    for (size_t i = skip; i < x->nk; i++) {
        const node *k = x->kids[i];
        if (k->k == E_KWARG) {
            if (a->nkw == 8)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "more than 8 keyword arguments");
            a->kn[a->nkw] = k->s;
            a->kl[a->nkw] = k->sn;
            if (!ev(C, k->a, &a->kv[a->nkw]))
                return false;
            a->nkw++;
        } else {
            if (a->np == 8)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "more than 8 arguments");
            if (!ev(C, k, &a->pos[a->np]))
                return false;
            a->np++;
        }
    }
    return true;
}

/* argument i (positional) or `name`; *have whether given */
static const jv *arg(const args *a, size_t i, const char *name)
{
    if (i < a->np)
        return &a->pos[i];
    for (size_t k = 0; k < a->nkw; k++)
        if (sn_is(a->kn[k], a->kl[k], name))
            return &a->kv[k];
    return NULL;
}

static const jv *kwarg(const args *a, const char *name)
{
    for (size_t k = 0; k < a->nkw; k++)
        if (sn_is(a->kn[k], a->kl[k], name))
            return &a->kv[k];
    return NULL;
}

static bool check_args(ctx *C, const args *a, size_t maxpos, const char *const *names, const char *what)
{
    if (a->np > maxpos)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s takes at most %zu arguments", what, maxpos);
    for (size_t k = 0; k < a->nkw; k++) {
        bool ok = false;
        for (size_t i = 0; names && names[i] && !ok; i++)
            ok = sn_is(a->kn[k], a->kl[k], names[i]);
        if (!ok)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s has no argument '%.*s'", what, (int)(a->kl[k] > 40 ? 40 : a->kl[k]), a->kn[k]);
    }
    return true;
}

bool need_str(ctx *C, const jv *v, const char *what)
{
    if (v->t == V_STR)
        return true;
    if (v->t == V_UNDEF)
        return undefined_error(C, v);
    return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s needs a string, not a %s", what, type_name(v));
}

bool need_int(ctx *C, const jv *v, const char *what)
{
    if (v->t == V_INT || v->t == V_BOOL)
        return true;
    if (v->t == V_UNDEF)
        return undefined_error(C, v);
    return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s needs an integer, not a %s", what, type_name(v));
}

/* str.split(sep, maxsplit) */
static bool vsplit(ctx *C, const jv *s, const jv *sep, int64_t maxsplit, jv *r)
{
    const char *p = s->u.s.p;
    size_t n = s->u.s.n;
    /* at most n + 1 parts */
    jv *parts = C_alloc(C, (n + 1) * sizeof(jv));
    if (!parts)
        return false;
    size_t np = 0;
    if (!sep || sep->t == V_NONE) {
        size_t i = 0;
        while (i < n) {
            i += ws_prefix(p + i, n - i);
            if (i >= n)
                break;
            if (maxsplit >= 0 && (int64_t)np == maxsplit) { /* the rest, trailing whitespace kept */
                parts[np++] = mkstr(p + i, n - i);
                break;
            }
            size_t b = i;
            while (i < n) {
                size_t l;
                if (py_space(u8_cp(p + i, n - i, &l)))
                    break;
                i += l;
            }
            parts[np++] = mkstr(p + b, i - b);
        }
    } else {
        if (!need_str(C, sep, "split"))
            return false;
        if (sep->u.s.n == 0)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "split with an empty separator");
        size_t i = 0;
        for (;;) {
            const char *f = (maxsplit >= 0 && (int64_t)np == maxsplit) ? NULL : find_sub(p + i, n - i, sep->u.s.p, sep->u.s.n);
            if (!f) {
                parts[np++] = mkstr(p + i, n - i);
                break;
            }
            parts[np++] = mkstr(p + i, (size_t)(f - (p + i)));
            i = (size_t)(f - p) + sep->u.s.n;
        }
    }
    if (!new_list(C, 0, r, false))
        return false;
    r->u.l->n = np;
    r->u.l->v = parts;
    return rcj_step(C, n);
}

static bool vreplace(ctx *C, const jv *s, const jv *old, const jv *nw, int64_t count, jv *r)
{
    if (!need_str(C, old, "replace") || !need_str(C, nw, "replace"))
        return false;
    sbuf b = {.max = RC_JINJA_MAX_MEMORY};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0;
    int64_t done = 0;
    if (old->u.s.n == 0) { /* Python inserts between every code point */
        for (;;) {
            if (count >= 0 && done >= count) {
                sb_add(&b, p + i, n - i);
                break;
            }
            sb_add(&b, nw->u.s.p, nw->u.s.n);
            done++;
            if (i >= n)
                break;
            size_t l;
            u8_cp(p + i, n - i, &l);
            sb_add(&b, p + i, l);
            i += l;
            if (!rcj_step(C, nw->u.s.n)) {
                free(b.p);
                return false;
            }
        }
    } else {
        for (;;) {
            const char *f = (count >= 0 && done >= count) ? NULL : find_sub(p + i, n - i, old->u.s.p, old->u.s.n);
            if (!f) {
                sb_add(&b, p + i, n - i);
                break;
            }
            sb_add(&b, p + i, (size_t)(f - (p + i)));
            sb_add(&b, nw->u.s.p, nw->u.s.n);
            i = (size_t)(f - p) + old->u.s.n;
            done++;
            if (!rcj_step(C, nw->u.s.n)) {
                free(b.p);
                return false;
            }
        }
    }
    return rcj_step(C, n) && sb_done(C, &b, r);
}

bool call_method(ctx *C, int id, const jv *self, const args *a, jv *r)
{
    const char *nm = k_methods[id];
    if (id < M_ITEMS && self->t != V_STR)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s() of a %s", nm, type_name(self));
    if (id >= M_ITEMS && self->t != V_DICT)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s() of a %s", nm, type_name(self));
    if (a->nkw && id != M_SPLIT)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s() with keyword arguments", nm);
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        if (a->np > 1)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s() takes at most 1 argument", nm);
        const jv *ch = a->np ? &a->pos[0] : NULL;
        if (ch && ch->t != V_NONE && !need_str(C, ch, nm))
            return false;
        bool byc = ch && ch->t == V_STR;
        *r = vstrip(self, id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2, byc ? ch->u.s.p : NULL, byc ? ch->u.s.n : 0);
        return rcj_step(C, self->u.s.n);
    }
    case M_SPLIT: {
        static const char *const names[] = {"sep", "maxsplit", NULL};
        if (!check_args(C, a, 2, names, "split()"))
            return false;
        const jv *sep = arg(a, 0, "sep"), *ms = arg(a, 1, "maxsplit");
        if (ms && !need_int(C, ms, "split()"))
            return false;
        return vsplit(C, self, sep, ms ? ms->u.i : -1, r);
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        if (a->np != 1)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s() takes 1 argument", nm);
        const jv *x = &a->pos[0];
        const jv *list = x;
        size_t cnt = 1;
        if (x->t == V_LIST && x->tup) {
            list = x->u.l->v;
            cnt = x->u.l->n;
        }
        bool hit = false;
        for (size_t i = 0; i < cnt && !hit; i++) {
            if (!need_str(C, &list[i], nm))
                return false;
            size_t pn = list[i].u.s.n;
            if (pn <= self->u.s.n)
                hit = !memcmp(id == M_STARTSWITH ? self->u.s.p : self->u.s.p + self->u.s.n - pn, list[i].u.s.p, pn);
        }
        *r = mkbool(hit);
        return true;
    }
    case M_UPPER:
    case M_LOWER:
    case M_TITLE:
    case M_CAPITALIZE:
        if (a->np)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s() takes no arguments", nm);
        return vcase(C, self, id == M_UPPER ? 1 : id == M_LOWER ? 2 : id == M_TITLE ? 3 : 4, r);
    case M_REPLACE:
        if (a->np < 2 || a->np > 3)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "replace() takes 2 or 3 arguments");
        if (a->np == 3 && !need_int(C, &a->pos[2], "replace()"))
            return false;
        return vreplace(C, self, &a->pos[0], &a->pos[1], a->np == 3 ? a->pos[2].u.i : -1, r);
    case M_FIND: {
        if (a->np != 1 || !need_str(C, &a->pos[0], "find()"))
            return a->np != 1 ? rcj_fail(C, RC_ERR_UNSUPPORTED, "find() takes 1 argument") : false;
        const char *f = find_sub(self->u.s.p, self->u.s.n, a->pos[0].u.s.p, a->pos[0].u.s.n);
        *r = mkint(f ? (int64_t)u8_count(self->u.s.p, (size_t)(f - self->u.s.p)) : -1);
        return rcj_step(C, self->u.s.n);
    }
    case M_JOIN: {
        if (a->np != 1)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "join() takes 1 argument");
        jlist *it;
        if (!to_items(C, &a->pos[0], &it))
            return false;
        sbuf b = {.max = RC_JINJA_MAX_MEMORY};
        for (size_t i = 0; i < it->n; i++) {
            if (!need_str(C, &it->v[i], "join()")) {
                free(b.p);
                return false;
            }
            if (i)
                sb_add(&b, self->u.s.p, self->u.s.n);
            sb_add(&b, it->v[i].u.s.p, it->v[i].u.s.n);
        }
        return rcj_step(C, b.n) && sb_done(C, &b, r);
    }
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: {
        if (a->np)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s() takes no arguments", nm);
        const jdict *d = self->u.d;
        if (!new_list(C, d->n, r, false))
            return false;
        for (size_t i = 0; i < d->n; i++) {
            if (id == M_KEYS)
                r->u.l->v[i] = d->k[i];
            else if (id == M_VALUES)
                r->u.l->v[i] = d->v[i];
            else {
                jv t;
                if (!new_list(C, 2, &t, true))
                    return false;
                t.u.l->v[0] = d->k[i];
                t.u.l->v[1] = d->v[i];
                r->u.l->v[i] = t;
            }
        }
        return rcj_step(C, d->n);
    }
    case M_GET: {
        if (a->np < 1 || a->np > 2)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "get() takes 1 or 2 arguments");
        size_t at;
        *r = dict_find(self->u.d, &a->pos[0], &at) ? self->u.d->v[at] : a->np == 2 ? a->pos[1] : k_none;
        return true;
    }
    }
    return rcj_fail(C, RC_ERR_INTERNAL, "an unknown method");
}

bool new_dict(ctx *C, size_t cap, jdict **out)
{
    jdict *d = C_alloc(C, sizeof *d);
    if (!d)
        return false;
    d->n = 0;
    d->cap = cap;
    d->k = cap ? C_alloc(C, cap * sizeof(jv)) : NULL;
    d->v = cap ? C_alloc(C, cap * sizeof(jv)) : NULL;
    if (cap && (!d->k || !d->v))
        return false;
    *out = d;
    return true;
}

bool dict_put(ctx *C, jdict *d, const jv *k, const jv *v)
{
    size_t at;
    if (!rcj_step(C, d->n << 6)) /* a linear search: one step per key */
        return false;
    if (dict_find(d, k, &at)) {
        d->v[at] = *v;
        return true;
    }
    if (d->n == d->cap) {
        size_t c = d->cap ? 2 * d->cap : 4;
        jv *nk = C_alloc(C, c * sizeof(jv)), *nv = nk ? C_alloc(C, c * sizeof(jv)) : NULL;
        if (!nv)
            return false;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = c;
    }
    d->k[d->n] = *k;
    d->v[d->n] = *v;
    d->n++;
    return rcj_step(C, 0);
}

bool call_function(ctx *C, const node *x, jv *r)
{
    args a;
    if (!eval_args(C, x, &a, 0))
        return false;
    switch (x->id) {
    case FN_RANGE: {
        if (a.nkw || a.np < 1 || a.np > 3)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "range() takes 1 to 3 integer arguments");
        for (size_t i = 0; i < a.np; i++)
            if (!need_int(C, &a.pos[i], "range()"))
                return false;
        int64_t lo = a.np > 1 ? a.pos[0].u.i : 0, hi = a.np > 1 ? a.pos[1].u.i : a.pos[0].u.i,
                st = a.np > 2 ? a.pos[2].u.i : 1;
        if (st == 0)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "range() with a zero step");
        double cnt = st > 0 ? ceil(((double)hi - (double)lo) / (double)st) : ceil(((double)lo - (double)hi) / (double)-st);
        if (cnt < 0)
            cnt = 0;
        if (cnt > RC_JINJA_MAX_RANGE)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "range() of more than %d items (jinja2's sandbox limit)", RC_JINJA_MAX_RANGE);
        if (!new_list(C, (size_t)cnt, r, false))
            return false;
        for (size_t i = 0; i < (size_t)cnt; i++)
            r->u.l->v[i] = mkint(lo + (int64_t)i * st);
        return rcj_step(C, (size_t)cnt);
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        jdict *d;
        if (!new_dict(C, a.nkw + 4, &d))
            return false;
        if (a.np > 1)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s() takes at most one positional argument", k_functions[x->id]);
        if (a.np == 1) {
            if (a.pos[0].t != V_DICT)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s() of a %s", k_functions[x->id], type_name(&a.pos[0]));
            for (size_t i = 0; i < a.pos[0].u.d->n; i++)
                if (!dict_put(C, d, &a.pos[0].u.d->k[i], &a.pos[0].u.d->v[i]))
                    return false;
        }
        for (size_t i = 0; i < a.nkw; i++) {
            jv k = mkstr(a.kn[i], a.kl[i]);
            if (!dict_put(C, d, &k, &a.kv[i]))
                return false;
        }
        if (x->id == FN_NAMESPACE)
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].t == V_STR && d->k[i].u.s.n && d->k[i].u.s.p[0] == '_')
                    return rcj_fail(C, RC_ERR_UNSUPPORTED, "a namespace attribute starting with '_'");
        r->t = x->id == FN_NAMESPACE ? V_NS : V_DICT;
        r->u.d = d;
        return true;
    }
    case FN_RAISE: {
        jv m = a.np ? a.pos[0] : k_undef;
        if (!to_str(C, &m, &m))
            return false;
        char msg[300];
        size_t k = 0;
        for (size_t i = 0; i < m.u.s.n && k + 1 < sizeof msg; i++)
            msg[k++] = (unsigned char)m.u.s.p[i] < 0x20 ? ' ' : m.u.s.p[i];
        msg[k] = '\0';
        return rcj_fail(C, RC_ERR_FORMAT, "raises \"%s\"", msg);
    }
    case FN_STRFTIME: {
        if (a.np != 1 || a.nkw || !need_str(C, &a.pos[0], "strftime_now()"))
            return a.np != 1 || a.nkw ? rcj_fail(C, RC_ERR_UNSUPPORTED, "strftime_now() takes 1 argument") : false;
        struct tm tm;
        if (C->J->fixed_time)
            tm = C->J->tm;
        else {
            time_t now = time(NULL);
            if (!localtime_r(&now, &tm))
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "strftime_now(): no local time");
        }
        char fmt[128], outb[512];
        if (a.pos[0].u.s.n >= sizeof fmt || memchr(a.pos[0].u.s.p, '\0', a.pos[0].u.s.n))
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "strftime_now() with a format over %zu bytes", sizeof fmt - 1);
        memcpy(fmt, a.pos[0].u.s.p, a.pos[0].u.s.n);
        fmt[a.pos[0].u.s.n] = '\0';
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        size_t w = a.pos[0].u.s.n ? strftime(outb, sizeof outb, fmt, &tm) : 0; /* the template's format, as Python's */
#pragma GCC diagnostic pop
        if (a.pos[0].u.s.n && w == 0)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "strftime_now(\"%s\") gives nothing or too much", fmt);
        char *p = new_str(C, w, r);
        if (p && w)
            memcpy(p, outb, w);
        return p != NULL;
    }
    }
    return rcj_fail(C, RC_ERR_INTERNAL, "an unknown function");
}

/* the attribute path "a.b.0" of an item (map / selectattr / join attribute=) */
static bool attr_path(ctx *C, const jv *item, const jv *path, jv *r)
{
    if (!need_str(C, path, "attribute"))
        return false;
    *r = *item;
    const char *p = path->u.s.p;
    size_t n = path->u.s.n, i = 0;
    while (i <= n) {
        size_t e = i;
        while (e < n && p[e] != '.')
            e++;
        jv k = mkstr(p + i, e - i);
        bool digits = e > i;
        for (size_t j = i; j < e; j++)
            digits = digits && is_dig(p[j]);
        if (digits && e - i < 18)
            k = mkint(strtoll(p + i, NULL, 10));
        jv nx;
        if (!getitem_v(C, r, &k, &nx))
            return false;
        *r = nx;
        i = e + 1;
    }
    return true;
}

bool run_test(ctx *C, int id, const jv *v, const args *a, bool *r)
{
    const jv *x = a->np ? &a->pos[0] : NULL;
    if (a->nkw)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "test '%s' with keyword arguments", k_tests[id]);
    switch (id) {
    case T_DEFINED: *r = v->t != V_UNDEF; return true;
    case T_UNDEFINED: *r = v->t == V_UNDEF; return true;
    case T_NONE: *r = v->t == V_NONE; return true;
    case T_BOOLEAN: *r = v->t == V_BOOL; return true;
    case T_TRUE: *r = v->t == V_BOOL && v->u.i; return true;
    case T_FALSE: *r = v->t == V_BOOL && !v->u.i; return true;
    case T_STRING: *r = v->t == V_STR; return true;
    case T_NUMBER: *r = is_num(v); return true;
    case T_INTEGER: *r = v->t == V_INT; return true;
    case T_FLOAT_: *r = v->t == V_FLOAT; return true;
    case T_MAPPING: *r = v->t == V_DICT; return true;
    case T_ITERABLE: *r = v->t == V_STR || v->t == V_LIST || v->t == V_DICT || v->t == V_UNDEF; return true;
    case T_SEQUENCE: *r = v->t == V_STR || v->t == V_LIST || v->t == V_DICT || v->t == V_UNDEF; return true;
    case T_CALLABLE: *r = v->t == V_FUNC || v->t == V_METHOD || v->t == V_MACRO; return true;
    case T_ODD:
    case T_EVEN:
        if (!need_int(C, v, k_tests[id]))
            return false;
        *r = ((v->u.i % 2) != 0) == (id == T_ODD);
        return true;
    case T_DIVISIBLEBY:
        if (!x || !need_int(C, v, "divisibleby") || !need_int(C, x, "divisibleby"))
            return x ? false : rcj_fail(C, RC_ERR_UNSUPPORTED, "divisibleby needs an argument");
        if (x->u.i == 0)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "divisibleby(0)");
        *r = v->u.i % x->u.i == 0;
        return true;
    case T_LOWER:
    case T_UPPER: {
        if (v->t != V_STR) {
            *r = false;
            return true;
        }
        bool lo = false, up = false;
        for (size_t i = 0; i < v->u.s.n;) {
            size_t l;
            uint32_t cp = u8_cp(v->u.s.p + i, v->u.s.n - i, &l);
            utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
            lo = lo || c == UTF8PROC_CATEGORY_LL;
            up = up || c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT;
            i += l;
        }
        *r = id == T_LOWER ? lo && !up : up && !lo;
        return rcj_step(C, v->u.s.n);
    }
    case T_SAMEAS:
        if (!x)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "sameas needs an argument");
        if (v->t != x->t)
            *r = false;
        else if (v->t == V_NONE || v->t == V_UNDEF)
            *r = true;
        else if (v->t == V_BOOL)
            *r = v->u.i == x->u.i;
        else if (v->t == V_LIST || v->t == V_DICT || v->t == V_NS)
            *r = v->u.l == x->u.l;
        else
            *r = false;
        return true;
    default: break;
    }
    if (!x)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "test '%s' needs an argument", k_tests[id]);
    switch (id) {
    case T_EQ:
    case T_EQUALTO:
    case T_OPEQ: *r = veq(v, x, 0); return true;
    case T_NE:
    case T_OPNE: *r = !veq(v, x, 0); return true;
    case T_IN: {
        jv b;
        if (!binary(C, 100 + CMP_IN, v, x, &b))
            return false;
        *r = b.u.i != 0;
        return true;
    }
    default: {
        int c;
        if (!vcmp(C, v, x, &c, 0))
            return false;
        if (id == T_LT || id == T_LESSTHAN || id == T_OPLT)
            *r = c < 0;
        else if (id == T_LE || id == T_OPLE)
            *r = c <= 0;
        else if (id == T_GT || id == T_GREATERTHAN || id == T_OPGT)
            *r = c > 0;
        else
            *r = c >= 0;
        return true;
    }
    }
}

/* select / reject / selectattr / rejectattr */
static bool filter_select(ctx *C, int id, const jv *v, const args *a, jv *r)
{
    bool attr = id == F_SELECTATTR || id == F_REJECTATTR, keep_true = id == F_SELECT || id == F_SELECTATTR;
    if (a->nkw)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s with keyword arguments", k_filters[id]);
    size_t first = attr ? 1 : 0;
    if (attr && a->np < 1)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s needs an attribute", k_filters[id]);
    int tid = -1;
    args ta = {.np = 0};
    if (a->np > first) {
        if (!need_str(C, &a->pos[first], k_filters[id]))
            return false;
        tid = FIND(k_tests, a->pos[first].u.s.p, a->pos[first].u.s.n);
        if (tid < 0)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s with the test '%.*s', which the subset does not have", k_filters[id],
                        (int)(a->pos[first].u.s.n > 40 ? 40 : a->pos[first].u.s.n), a->pos[first].u.s.p);
        for (size_t i = first + 1; i < a->np; i++)
            ta.pos[ta.np++] = a->pos[i];
    }
    if (!truthy(v)) /* jinja2's select_or_reject: "if value:" */
        return new_list(C, 0, r, false);
    jlist *it;
    if (!to_items(C, v, &it))
        return false;
    if (!new_list(C, it->n, r, false))
        return false;
    size_t w = 0;
    for (size_t i = 0; i < it->n; i++) {
        jv x = it->v[i];
        if (attr && !attr_path(C, &it->v[i], &a->pos[0], &x))
            return false;
        bool t;
        if (tid < 0)
            t = truthy(&x);
        else if (!run_test(C, tid, &x, &ta, &t))
            return false;
        if (t == keep_true)
            r->u.l->v[w++] = it->v[i];
        if (!rcj_step(C, 0))
            return false;
    }
    r->u.l->n = w;
    return true;
}

/* jinja2's title filter (not str.title): words start after runs of "-", whitespace, "(", "{", "[", "<";
 * each word's first character upper-cased, the rest lower-cased */
static bool title_filter(ctx *C, const jv *s, jv *r)
{
    sbuf b = {.max = RC_JINJA_MAX_MEMORY};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0;
    bool start = true;
    while (i < n) {
        size_t l;
        uint32_t cp = u8_cp(p + i, n - i, &l);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_space(cp);
        jv one = mkstr(p + i, l), out;
        if (sep) {
            sb_add(&b, p + i, l);
            start = true;
        } else {
            if (!vcase(C, &one, start ? 1 : 2, &out)) {
                free(b.p);
                return false;
            }
            sb_add(&b, out.u.s.p, out.u.s.n);
            start = false;
        }
        i += l;
    }
    return rcj_step(C, n) && sb_done(C, &b, r);
}

static bool indent_filter(ctx *C, const jv *v, const args *a, jv *r)
{
    static const char *const names[] = {"width", "first", "blank", NULL};
    if (!check_args(C, a, 3, names, "indent"))
        return false;
    const jv *wv = arg(a, 0, "width"), *fv = arg(a, 1, "first"), *bv = arg(a, 2, "blank");
    jv s;
    if (!to_str(C, v, &s))
        return false;
    char sp[256];
    const char *ind = sp;
    size_t indn = 4;
    memset(sp, ' ', sizeof sp);
    if (wv && wv->t == V_STR) {
        ind = wv->u.s.p;
        indn = wv->u.s.n;
    } else if (wv) {
        if (!need_int(C, wv, "indent"))
            return false;
        if (wv->u.i < 0 || wv->u.i > 256)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "indent width outside 0..256");
        indn = (size_t)wv->u.i;
    }
    bool first = fv && truthy(fv), blank = bv && truthy(bv);
    /* s + "\n" split into lines (Python's splitlines) */
    sbuf b = {.max = RC_JINJA_MAX_MEMORY};
    if (first)
        sb_add(&b, ind, indn);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    bool line0 = true;
    while (i <= n) {
        /* a line: up to a line boundary (or the end, which is the added "\n") */
        size_t e = i, nl = 0;
        while (e < n) {
            size_t l;
            uint32_t cp = u8_cp(p + e, n - e, &l);
            if (cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 ||
                cp == 0x2028 || cp == 0x2029) {
                nl = (cp == '\r' && e + 1 < n && p[e + 1] == '\n') ? 2 : l;
                break;
            }
            e += l;
        }
        if (e >= n && i == n && !line0)
            break; /* the empty piece after the added newline */
        if (!line0) {
            sb_str(&b, "\n");
            if (blank || e > i)
                sb_add(&b, ind, indn);
        }
        sb_add(&b, p + i, e - i);
        line0 = false;
        if (e >= n)
            break;
        i = e + nl;
    }
    return rcj_step(C, n) && sb_done(C, &b, r);
}

bool apply_filter(ctx *C, int id, const jv *v, const args *a, jv *r)
{
    const char *fn = k_filters[id];
    switch (id) {
    case F_TRIM: {
        static const char *const names[] = {"chars", NULL};
        if (!check_args(C, a, 1, names, "trim"))
            return false;
        const jv *ch = arg(a, 0, "chars");
        jv s;
        if (!to_str(C, v, &s))
            return false;
        if (ch && ch->t != V_NONE && !need_str(C, ch, "trim"))
            return false;
        bool byc = ch && ch->t == V_STR;
        *r = vstrip(&s, 3, byc ? ch->u.s.p : NULL, byc ? ch->u.s.n : 0);
        return rcj_step(C, s.u.s.n);
    }
    case F_LENGTH:
    case F_COUNT:
        if (a->np || a->nkw)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
        switch (v->t) {
        case V_UNDEF: *r = mkint(0); return true;
        case V_STR: *r = mkint((int64_t)u8_count(v->u.s.p, v->u.s.n)); return rcj_step(C, v->u.s.n);
        case V_LIST: *r = mkint((int64_t)v->u.l->n); return true;
        case V_DICT:
        case V_NS: *r = mkint((int64_t)v->u.d->n); return true;
        default: return rcj_fail(C, RC_ERR_UNSUPPORTED, "length of a %s", type_name(v));
        }
    case F_STRING:
    case F_SAFE:
        if (a->np || a->nkw)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
        if (id == F_SAFE) {
            *r = *v;
            return true;
        }
        return to_str(C, v, r);
    case F_LOWER:
    case F_UPPER:
    case F_TITLE:
    case F_CAPITALIZE: {
        if (a->np || a->nkw)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
        jv s;
        if (!to_str(C, v, &s))
            return false;
        if (id == F_TITLE)
            return title_filter(C, &s, r);
        return vcase(C, &s, id == F_UPPER ? 1 : id == F_LOWER ? 2 : 4, r);
    }
    case F_E:
    case F_ESCAPE: {
        if (a->np || a->nkw)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
        jv s;
        if (!to_str(C, v, &s))
            return false;
        sbuf b = {.max = RC_JINJA_MAX_MEMORY};
        for (size_t i = 0; i < s.u.s.n; i++) {
            char c = s.u.s.p[i];
            if (c == '&')
                sb_str(&b, "&amp;");
            else if (c == '<')
                sb_str(&b, "&lt;");
            else if (c == '>')
                sb_str(&b, "&gt;");
            else if (c == '"')
                sb_str(&b, "&#34;");
            else if (c == '\'')
                sb_str(&b, "&#39;");
            else
                sb_add(&b, &c, 1);
        }
        return rcj_step(C, s.u.s.n) && sb_done(C, &b, r);
    }
    case F_JOIN: {
        static const char *const names[] = {"d", "attribute", NULL};
        if (!check_args(C, a, 2, names, "join"))
            return false;
        const jv *d = arg(a, 0, "d"), *at = arg(a, 1, "attribute");
        jv sep = mkstr("", 0);
        if (d && !to_str(C, d, &sep))
            return false;
        jlist *it;
        if (!to_items(C, v, &it))
            return false;
        sbuf b = {.max = RC_JINJA_MAX_MEMORY};
        for (size_t i = 0; i < it->n; i++) {
            jv x = it->v[i], s;
            if ((at && !attr_path(C, &it->v[i], at, &x)) || !to_str(C, &x, &s)) {
                free(b.p);
                return false;
            }
            if (i)
                sb_add(&b, sep.u.s.p, sep.u.s.n);
            sb_add(&b, s.u.s.p, s.u.s.n);
        }
        return rcj_step(C, b.n) && sb_done(C, &b, r);
    }
    case F_FIRST:
    case F_LAST: {
        if (a->np || a->nkw)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
        jlist *it;
        if (!to_items(C, v, &it))
            return false;
        *r = it->n ? it->v[id == F_FIRST ? 0 : it->n - 1] : k_undef;
        return true;
    }
    case F_LIST:
    case F_REVERSE: {
        if (a->np || a->nkw)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
        if (id == F_REVERSE && v->t == V_STR) {
            size_t cnt, *off = cp_offsets(C, v->u.s.p, v->u.s.n, &cnt);
            char *p = off ? new_str(C, v->u.s.n, r) : NULL;
            if (!p)
                return false;
            size_t w = 0;
            for (size_t i = cnt; i-- > 0;) {
                memcpy(p + w, v->u.s.p + off[i], off[i + 1] - off[i]);
                w += off[i + 1] - off[i];
            }
            return rcj_step(C, v->u.s.n);
        }
        jlist *it;
        if (!to_items(C, v, &it) || !new_list(C, it->n, r, false))
            return false;
        for (size_t i = 0; i < it->n; i++)
            r->u.l->v[i] = it->v[id == F_LIST ? i : it->n - 1 - i];
        return rcj_step(C, it->n);
    }
    case F_ITEMS: {
        if (a->np || a->nkw)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "items takes no arguments");
        if (v->t == V_UNDEF)
            return new_list(C, 0, r, false);
        if (v->t != V_DICT)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "items of a %s", type_name(v));
        args none = {.np = 0};
        return call_method(C, M_ITEMS, v, &none, r);
    }
    case F_SELECT:
    case F_REJECT:
    case F_SELECTATTR:
    case F_REJECTATTR: return filter_select(C, id, v, a, r);
    case F_MAP: {
        const jv *at = NULL, *dflt = NULL;
        for (size_t k = 0; k < a->nkw; k++) {
            if (sn_is(a->kn[k], a->kl[k], "attribute"))
                at = &a->kv[k];
            else if (sn_is(a->kn[k], a->kl[k], "default"))
                dflt = &a->kv[k];
            else
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "map has no argument '%.*s'", (int)(a->kl[k] > 40 ? 40 : a->kl[k]),
                            a->kn[k]);
        }
        int fid = -1;
        args fa = {.np = 0};
        if (!at) {
            if (a->np < 1 || !need_str(C, &a->pos[0], "map"))
                return a->np < 1 ? rcj_fail(C, RC_ERR_UNSUPPORTED, "map needs a filter name or attribute=") : false;
            fid = FIND(k_filters, a->pos[0].u.s.p, a->pos[0].u.s.n);
            if (fid < 0 || fid == F_MAP)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "map with the filter '%.*s', which the subset does not have",
                            (int)(a->pos[0].u.s.n > 40 ? 40 : a->pos[0].u.s.n), a->pos[0].u.s.p);
            for (size_t i = 1; i < a->np; i++)
                fa.pos[fa.np++] = a->pos[i];
        } else if (a->np)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "map with attribute= and positional arguments");
        if (!truthy(v)) /* jinja2's do_map: "if value:" */
            return new_list(C, 0, r, false);
        jlist *it;
        if (!to_items(C, v, &it) || !new_list(C, it->n, r, false))
            return false;
        for (size_t i = 0; i < it->n; i++) {
            jv x;
            if (at) {
                if (!attr_path(C, &it->v[i], at, &x))
                    return false;
                if (x.t == V_UNDEF && dflt)
                    x = *dflt;
            } else if (!apply_filter(C, fid, &it->v[i], &fa, &x))
                return false;
            r->u.l->v[i] = x;
        }
        return rcj_step(C, it->n);
    }
    case F_D:
    case F_DEFAULT: {
        static const char *const names[] = {"default_value", "boolean", NULL};
        if (!check_args(C, a, 2, names, fn))
            return false;
        const jv *dv = arg(a, 0, "default_value"), *bo = arg(a, 1, "boolean");
        bool use = v->t == V_UNDEF || (bo && truthy(bo) && !truthy(v));
        *r = use ? (dv ? *dv : mkstr("", 0)) : *v;
        return true;
    }
    case F_INT:
    case F_FLOAT: {
        static const char *const names[] = {"default", "base", NULL};
        if (!check_args(C, a, id == F_INT ? 2 : 1, names, fn))
            return false;
        const jv *dv = arg(a, 0, "default");
        if (id == F_INT && arg(a, 1, "base"))
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "int with a base");
        jv d = dv ? *dv : (id == F_INT ? mkint(0) : mkfloat(0.0));
        if (is_num(v)) {
            if (id == F_FLOAT)
                *r = mkfloat(num_f(v));
            else if (v->t == V_FLOAT) {
                if (!(fabs(v->u.f) < 9.2e18))
                    return rcj_fail(C, RC_ERR_UNSUPPORTED, "int of %g", v->u.f);
                *r = mkint((int64_t)v->u.f);
            } else
                *r = mkint(v->u.i);
            return true;
        }
        if (v->t != V_STR) {
            *r = d;
            return true;
        }
        char buf[64];
        jv t = vstrip(v, 3, NULL, 0);
        size_t w = 0;
        for (size_t i = 0; i < t.u.s.n && w + 1 < sizeof buf; i++)
            if (t.u.s.p[i] != '_')
                buf[w++] = t.u.s.p[i];
        buf[w] = '\0';
        if (t.u.s.n == 0 || t.u.s.n >= sizeof buf) {
            *r = d;
            return true;
        }
        char *end;
        if (id == F_INT) {
            long long x = strtoll(buf, &end, 10);
            if (*end == '\0' && w <= 18) {
                *r = mkint(x);
                return true;
            }
        }
        bool decimal = w > 0;
        for (size_t k = 0; k < w; k++) /* Python's int() / float() of a decimal string (no hex, inf or nan) */
            decimal = decimal && (is_dig(buf[k]) || buf[k] == '+' || buf[k] == '-' || buf[k] == '.' || buf[k] == 'e' ||
                                  buf[k] == 'E');
        double f = decimal ? strtod(buf, &end) : 0.0;
        if (!decimal || *end != '\0') {
            *r = d;
            return true;
        }
        if (id == F_FLOAT)
            *r = mkfloat(f);
        else if (fabs(f) < 9.2e18)
            *r = mkint((int64_t)f);
        else
            *r = d;
        return true;
    }
    case F_ABS:
        if (a->np || a->nkw)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "abs takes no arguments");
        if (v->t == V_FLOAT)
            *r = mkfloat(fabs(v->u.f));
        else if (v->t == V_INT || v->t == V_BOOL) {
            if (v->u.i == INT64_MIN)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "an integer beyond 64 bits");
            *r = mkint(v->u.i < 0 ? -v->u.i : v->u.i);
        } else
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "abs of a %s", type_name(v));
        return true;
    case F_ROUND: {
        static const char *const names[] = {"precision", "method", NULL};
        if (!check_args(C, a, 2, names, "round"))
            return false;
        const jv *pv = arg(a, 0, "precision"), *mv = arg(a, 1, "method");
        if (pv && !(pv->t == V_INT && pv->u.i == 0))
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "round with a precision other than 0");
        if (!is_num(v))
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "round of a %s", type_name(v));
        double f = num_f(v);
        if (!mv || (mv->t == V_STR && sn_is(mv->u.s.p, mv->u.s.n, "common")))
            f = nearbyint(f);
        else if (mv->t == V_STR && sn_is(mv->u.s.p, mv->u.s.n, "ceil"))
            f = ceil(f);
        else if (mv->t == V_STR && sn_is(mv->u.s.p, mv->u.s.n, "floor"))
            f = floor(f);
        else
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "round with an unknown method");
        *r = mkfloat(f);
        return true;
    }
    case F_REPLACE: {
        static const char *const names[] = {"old", "new", "count", NULL};
        if (!check_args(C, a, 3, names, "replace"))
            return false;
        const jv *o = arg(a, 0, "old"), *nw = arg(a, 1, "new"), *cnt = arg(a, 2, "count");
        if (!o || !nw)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "replace needs old and new");
        if (cnt && cnt->t != V_NONE && !need_int(C, cnt, "replace"))
            return false;
        jv s;
        return to_str(C, v, &s) && vreplace(C, &s, o, nw, cnt && cnt->t != V_NONE ? cnt->u.i : -1, r);
    }
    case F_TOJSON: {
        static const char *const names[] = {"indent", "ensure_ascii", "separators", "sort_keys", NULL};
        if (!check_args(C, a, 0, names, "tojson"))
            return false;
        const jv *iv = kwarg(a, "indent"), *av = kwarg(a, "ensure_ascii"), *sv = kwarg(a, "separators"),
                 *kv = kwarg(a, "sort_keys");
        jopt o = {.ascii = av && truthy(av), .sort = kv && truthy(kv), .isep = ", ", .isepn = 2, .ksep = ": ", .ksepn = 2};
        char sp[64];
        memset(sp, ' ', sizeof sp);
        if (iv && iv->t != V_NONE) {
            o.indent = true;
            o.isep = ",";
            o.isepn = 1;
            if (iv->t == V_STR) {
                o.ind = iv->u.s.p;
                o.indn = iv->u.s.n;
            } else if (iv->t == V_INT && iv->u.i >= 0 && iv->u.i <= 64) {
                o.ind = sp;
                o.indn = (size_t)iv->u.i;
            } else
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "tojson indent outside 0..64");
        }
        if (sv && sv->t != V_NONE) {
            if (sv->t != V_LIST || sv->u.l->n != 2 || sv->u.l->v[0].t != V_STR || sv->u.l->v[1].t != V_STR)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "tojson separators that are not two strings");
            o.isep = sv->u.l->v[0].u.s.p;
            o.isepn = sv->u.l->v[0].u.s.n;
            o.ksep = sv->u.l->v[1].u.s.p;
            o.ksepn = sv->u.l->v[1].u.s.n;
        }
        sbuf b = {.max = RC_JINJA_MAX_MEMORY};
        if (!vjson(C, &b, v, &o, 0)) {
            free(b.p);
            return false;
        }
        return sb_done(C, &b, r);
    }
    case F_UNIQUE: {
        static const char *const names[] = {"case_sensitive", "attribute", NULL};
        if (!check_args(C, a, 2, names, "unique"))
            return false;
        const jv *cs = arg(a, 0, "case_sensitive"), *at = arg(a, 1, "attribute");
        bool sens = cs && truthy(cs);
        jlist *it;
        if (!to_items(C, v, &it) || !new_list(C, it->n, r, false))
            return false;
        jv *keys = it->n ? C_alloc(C, it->n * sizeof(jv)) : NULL;
        if (it->n && !keys)
            return false;
        size_t w = 0;
        for (size_t i = 0; i < it->n; i++) {
            jv k = it->v[i];
            if (at && !attr_path(C, &it->v[i], at, &k))
                return false;
            if (!sens && k.t == V_STR && !vcase(C, &k, 2, &k))
                return false;
            bool seen = false;
            if (!rcj_step(C, w << 6))
                return false;
            for (size_t j = 0; j < w && !seen; j++)
                seen = veq(&keys[j], &k, 0);
            if (!seen) {
                keys[w] = k;
                r->u.l->v[w++] = it->v[i];
            }
        }
        r->u.l->n = w;
        return true;
    }
    case F_INDENT: return indent_filter(C, v, a, r);
    }
    return rcj_fail(C, RC_ERR_INTERNAL, "an unknown filter");
}
