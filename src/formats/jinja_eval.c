/* The Jinja subset interpreter (jinja_impl.h): operators, slices,
 * expressions, statements and rc_jinja_render. */
#include "jinja_impl.h"

/* ======================================================================== */
/* operators, expressions, statements                                       */
/* ======================================================================== */

static bool checked_int(ctx *C, int op, int64_t a, int64_t b, jv *r)
{
    int64_t x = 0;
    bool ovf = false;
    switch (op) {
    case OP_ADD: ovf = __builtin_add_overflow(a, b, &x); break;
    case OP_SUB: ovf = __builtin_sub_overflow(a, b, &x); break;
    case OP_MUL: ovf = __builtin_mul_overflow(a, b, &x); break;
    case OP_FLOORDIV:
    case OP_MOD:
        if (b == 0)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "integer division or modulo by zero");
        if (a == INT64_MIN && b == -1)
            ovf = true;
        else {
            int64_t q = a / b, m = a % b;
            if (m != 0 && ((m < 0) != (b < 0))) {
                q--;
                m += b;
            }
            x = op == OP_FLOORDIV ? q : m;
        }
        break;
    case OP_POW:
        if (b < 0) {
            *r = mkfloat(pow((double)a, (double)b));
            return true;
        }
        x = 1;
        for (int64_t i = 0; i < b && !ovf; i++) {
            ovf = __builtin_mul_overflow(x, a, &x);
            if (x == 0 || x == 1 || (x == -1 && a == -1 && b - i > 64))
                break;
        }
        if (!ovf && a == -1)
            x = (b % 2) ? -1 : 1;
        break;
    }
    if (ovf)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "an integer beyond 64 bits");
    *r = mkint(x);
    return true;
}

/* arithmetic (op < 100) and comparisons (100 + CMP_x) */
bool binary(ctx *C, int op, const jv *a, const jv *b, jv *r)
{
    if (op >= 100) {
        int c = op - 100;
        if (c == CMP_EQ || c == CMP_NE) {
            *r = mkbool(veq(a, b, 0) == (c == CMP_EQ));
            return true;
        }
        if (c == CMP_IN || c == CMP_NOTIN) {
            bool in = false;
            if (b->t == V_STR) {
                if (!need_str(C, a, "'in' with a string"))
                    return false;
                in = find_sub(b->u.s.p, b->u.s.n, a->u.s.p, a->u.s.n) != NULL;
                if (!rcj_step(C, b->u.s.n))
                    return false;
            } else if (b->t == V_LIST) {
                if (!rcj_step(C, b->u.l->n << 6))
                    return false;
                for (size_t i = 0; i < b->u.l->n && !in; i++)
                    in = veq(a, &b->u.l->v[i], 0);
            } else if (b->t == V_DICT) {
                size_t at;
                if (!rcj_step(C, b->u.d->n << 6))
                    return false;
                in = dict_find(b->u.d, a, &at);
            } else if (b->t != V_UNDEF)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "'in' a %s", type_name(b));
            *r = mkbool(in == (c == CMP_IN));
            return true;
        }
        int k;
        if (!vcmp(C, a, b, &k, 0))
            return false;
        *r = mkbool(c == CMP_LT ? k < 0 : c == CMP_LE ? k <= 0 : c == CMP_GT ? k > 0 : k >= 0);
        return true;
    }
    if (a->t == V_UNDEF)
        return undefined_error(C, a);
    if (b->t == V_UNDEF)
        return undefined_error(C, b);
    static const char *const sym[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (is_num(a) && is_num(b)) {
        if (op == OP_DIV) {
            double y = num_f(b);
            if (y == 0.0)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "division by zero");
            *r = mkfloat(num_f(a) / y);
            return true;
        }
        if (a->t != V_FLOAT && b->t != V_FLOAT)
            return checked_int(C, op, a->u.i, b->u.i, r);
        double x = num_f(a), y = num_f(b), z = 0;
        switch (op) {
        case OP_ADD: z = x + y; break;
        case OP_SUB: z = x - y; break;
        case OP_MUL: z = x * y; break;
        case OP_FLOORDIV:
        case OP_MOD:
            if (y == 0.0)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "float division or modulo by zero");
            if (op == OP_FLOORDIV)
                z = floor(x / y);
            else {
                z = fmod(x, y);
                if (z != 0.0 && ((z < 0) != (y < 0)))
                    z += y;
            }
            break;
        case OP_POW: z = pow(x, y); break;
        }
        *r = mkfloat(z);
        return true;
    }
    if (op == OP_ADD && a->t == V_STR && b->t == V_STR)
        return vconcat(C, a->u.s.p, a->u.s.n, b->u.s.p, b->u.s.n, r);
    if (op == OP_ADD && a->t == V_LIST && b->t == V_LIST && a->tup == b->tup) {
        size_t n = a->u.l->n + b->u.l->n;
        if (!new_list(C, n, r, a->tup))
            return false;
        if (a->u.l->n)
            memcpy(r->u.l->v, a->u.l->v, a->u.l->n * sizeof(jv));
        if (b->u.l->n)
            memcpy(r->u.l->v + a->u.l->n, b->u.l->v, b->u.l->n * sizeof(jv));
        return rcj_step(C, n);
    }
    if (op == OP_MUL && ((a->t == V_STR || a->t == V_LIST) && (b->t == V_INT || b->t == V_BOOL))) {
        int64_t k = b->u.i < 0 ? 0 : b->u.i;
        if (a->t == V_STR) {
            if (k && a->u.s.n > RC_JINJA_MAX_MEMORY / (size_t)k)
                return too_big(C);
            char *p = new_str(C, a->u.s.n * (size_t)k, r);
            if (!p)
                return false;
            for (int64_t i = 0; i < k && a->u.s.n; i++)
                memcpy(p + (size_t)i * a->u.s.n, a->u.s.p, a->u.s.n);
            return rcj_step(C, a->u.s.n * (size_t)k);
        }
        if (k && a->u.l->n > RC_JINJA_MAX_MEMORY / sizeof(jv) / (size_t)k)
            return too_big(C);
        size_t n = a->u.l->n * (size_t)k;
        if (!new_list(C, n, r, a->tup))
            return false;
        for (int64_t i = 0; i < k && a->u.l->n; i++)
            memcpy(r->u.l->v + (size_t)i * a->u.l->n, a->u.l->v, a->u.l->n * sizeof(jv));
        return rcj_step(C, n);
    }
    if (op == OP_MUL && (b->t == V_STR || b->t == V_LIST) && (a->t == V_INT || a->t == V_BOOL))
        return binary(C, op, b, a, r);
    if (op == OP_MOD && a->t == V_STR)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "unsupported Jinja construct 'string %% formatting'");
    return rcj_fail(C, RC_ERR_UNSUPPORTED, "unsupported operand types for %s: '%s' and '%s'", sym[op], type_name(a),
                type_name(b));
}

static bool slice_v(ctx *C, const jv *o, const jv *s0, const jv *s1, const jv *s2, jv *r)
{
    if (o->t == V_UNDEF)
        return undefined_error(C, o);
    if (o->t != V_LIST && o->t != V_STR)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "a slice of a %s", type_name(o));
    const jv *pv[3] = {s0, s1, s2};
    for (int i = 0; i < 3; i++)
        if (pv[i]->t != V_NONE && !need_int(C, pv[i], "a slice"))
            return false;
    int64_t step_ = s2->t == V_NONE ? 1 : s2->u.i;
    if (step_ == 0)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "a slice step of zero");
    size_t cnt = 0, *off = NULL;
    if (o->t == V_STR) {
        cnt = u8_count(o->u.s.p, o->u.s.n);
        if (cnt != o->u.s.n && !(off = cp_offsets(C, o->u.s.p, o->u.s.n, &cnt)))
            return false; /* not ASCII: the offsets of the code points */
    } else
        cnt = o->u.l->n;
    int64_t n = (int64_t)cnt, lo, hi;
    /* Python's slice.indices */
    if (step_ > 0) {
        lo = s0->t == V_NONE ? 0 : s0->u.i;
        hi = s1->t == V_NONE ? n : s1->u.i;
        if (lo < 0)
            lo = lo + n < 0 ? 0 : lo + n;
        else if (lo > n)
            lo = n;
        if (hi < 0)
            hi = hi + n < 0 ? 0 : hi + n;
        else if (hi > n)
            hi = n;
    } else {
        lo = s0->t == V_NONE ? n - 1 : s0->u.i;
        hi = s1->t == V_NONE ? -1 : s1->u.i;
        if (lo < 0)
            lo = lo + n < 0 ? -1 : lo + n;
        else if (lo >= n)
            lo = n - 1;
        if (s1->t != V_NONE) {
            if (hi < 0)
                hi = hi + n < 0 ? -1 : hi + n;
            else if (hi >= n)
                hi = n - 1;
        }
    }
    /* the indices lo, lo + step, ... before hi: k of them */
    size_t k = 0;
    if (step_ > 0 && hi > lo)
        k = (size_t)((hi - lo + step_ - 1) / step_);
    else if (step_ < 0 && lo > hi)
        k = (size_t)((lo - hi + (-step_) - 1) / (-step_));
#define IDX(i) ((size_t)(lo + (int64_t)(i) * step_))
    if (o->t == V_LIST) {
        if (!new_list(C, k, r, o->tup))
            return false;
        for (size_t i = 0; i < k; i++)
            r->u.l->v[i] = o->u.l->v[IDX(i)];
        return rcj_step(C, k);
    }
    size_t bytes = 0;
    for (size_t i = 0; i < k; i++)
        bytes += off ? off[IDX(i) + 1] - off[IDX(i)] : 1;
    char *p = new_str(C, bytes, r);
    if (!p)
        return false;
    size_t w = 0;
    for (size_t i = 0; i < k; i++) {
        size_t b = off ? off[IDX(i)] : IDX(i), l = off ? off[IDX(i) + 1] - off[IDX(i)] : 1;
        memcpy(p + w, o->u.s.p + b, l);
        w += l;
    }
#undef IDX
    return rcj_step(C, o->u.s.n);
}

bool ev(ctx *C, const node *x, jv *r)
{
    if (!rcj_step(C, 0))
        return false;
    C->line = x->line;
    switch (x->k) {
    case E_LIT:
        switch (x->lt) {
        case 1: *r = mkstr(x->s, x->sn); return true;
        case 2: *r = mkint(x->li); return true;
        case 3: *r = mkfloat(x->lf); return true;
        case 4: *r = mkbool(x->li != 0); return true;
        default: *r = k_none; return true;
        }
    case E_NONE_ARG: *r = k_none; return true;
    case E_NAME:
        if (var_lookup(C, x->s, x->sn, r))
            return true;
        {
            int f = FIND(k_functions, x->s, x->sn);
            if (f >= 0) {
                r->t = V_FUNC;
                r->u.m.id = f;
                r->u.m.self = NULL;
                return true;
            }
        }
        *r = undef_named(x->s, x->sn);
        return true;
    case E_LIST:
    case E_TUPLE:
        if (!new_list(C, x->nk, r, x->k == E_TUPLE))
            return false;
        for (size_t i = 0; i < x->nk; i++)
            if (!ev(C, x->kids[i], &r->u.l->v[i]))
                return false;
        return true;
    case E_DICT: {
        jdict *d;
        if (!new_dict(C, x->nk / 2, &d))
            return false;
        for (size_t i = 0; i + 1 < x->nk; i += 2) {
            jv k, v;
            if (!ev(C, x->kids[i], &k) || !ev(C, x->kids[i + 1], &v))
                return false;
            if (k.t == V_LIST && !k.tup)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "a list as a dict key");
            if (k.t == V_DICT || k.t == V_UNDEF)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "a %s as a dict key", type_name(&k));
            if (!dict_put(C, d, &k, &v))
                return false;
        }
        r->t = V_DICT;
        r->u.d = d;
        return true;
    }
    case E_ATTR: {
        jv o;
        if (!ev(C, x->a, &o))
            return false;
        if (o.t == V_UNDEF && !o.u.s.p && x->a->k == E_NAME)
            o = undef_named(x->a->s, x->a->sn);
        return getattr_v(C, &o, x->s, x->sn, r);
    }
    case E_ITEM: {
        jv o, k;
        if (!ev(C, x->a, &o) || !ev(C, x->b, &k))
            return false;
        return getitem_v(C, &o, &k, r);
    }
    case E_SLICE: {
        jv o, p[3];
        if (!ev(C, x->a, &o))
            return false;
        for (int i = 0; i < 3; i++)
            if (!ev(C, x->kids[i], &p[i]))
                return false;
        return slice_v(C, &o, &p[0], &p[1], &p[2], r);
    }
    case E_CALL: {
        if (x->a->k == E_NAME)
            return x->id == FN_MACRO ? call_macro(C, x, r) : call_function(C, x, r);
        jv self;
        if (!ev(C, x->a->a, &self))
            return false;
        if (self.t == V_UNDEF)
            return undefined_error(C, &self);
        args a;
        if (!eval_args(C, x, &a, 0))
            return false;
        return call_method(C, x->id - 100, &self, &a, r);
    }
    case E_FILTER: {
        jv v;
        if (!ev(C, x->a, &v))
            return false;
        args a;
        if (!eval_args(C, x, &a, 0))
            return false;
        return apply_filter(C, x->id, &v, &a, r);
    }
    case E_TEST: {
        jv v;
        if (!ev(C, x->a, &v))
            return false;
        args a;
        if (!eval_args(C, x, &a, 0))
            return false;
        bool t;
        if (!run_test(C, x->id, &v, &a, &t))
            return false;
        *r = mkbool(t != x->neg);
        return true;
    }
    case E_NOT: {
        jv v;
        if (!ev(C, x->a, &v))
            return false;
        *r = mkbool(!truthy(&v));
        return true;
    }
    case E_NEG:
    case E_POS: {
        jv v;
        if (!ev(C, x->a, &v))
            return false;
        if (v.t == V_UNDEF)
            return undefined_error(C, &v);
        if (v.t == V_FLOAT)
            *r = mkfloat(x->k == E_NEG ? -v.u.f : v.u.f);
        else if (v.t == V_INT || v.t == V_BOOL) {
            if (x->k == E_NEG && v.u.i == INT64_MIN)
                return rcj_fail(C, RC_ERR_UNSUPPORTED, "an integer beyond 64 bits");
            *r = mkint(x->k == E_NEG ? -v.u.i : v.u.i);
        } else
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "bad operand type for unary %c: '%s'", x->k == E_NEG ? '-' : '+',
                        type_name(&v));
        return true;
    }
    case E_AND:
    case E_OR: {
        if (!ev(C, x->a, r))
            return false;
        if (truthy(r) == (x->k == E_OR))
            return true;
        return ev(C, x->b, r);
    }
    case E_BIN: {
        jv a, b;
        if (!ev(C, x->a, &a) || !ev(C, x->b, &b))
            return false;
        return binary(C, x->op, &a, &b, r);
    }
    case E_CONCAT: {
        jv a, b;
        if (!ev(C, x->a, &a) || !ev(C, x->b, &b) || !to_str(C, &a, &a) || !to_str(C, &b, &b))
            return false;
        return vconcat(C, a.u.s.p, a.u.s.n, b.u.s.p, b.u.s.n, r);
    }
    case E_COMPARE: {
        jv a;
        if (!ev(C, x->kids[0], &a))
            return false;
        for (size_t i = 1; i < x->nk; i++) {
            jv b;
            if (!ev(C, x->kids[i], &b) || !binary(C, 100 + x->ops[i], &a, &b, r))
                return false;
            if (!r->u.i)
                return true;
            a = b;
        }
        return true;
    }
    case E_COND: {
        jv c;
        if (!ev(C, x->b, &c))
            return false;
        if (truthy(&c))
            return ev(C, x->a, r);
        if (x->c)
            return ev(C, x->c, r);
        *r = k_undef;
        return true;
    }
    default: return rcj_fail(C, RC_ERR_INTERNAL, "an unknown expression");
    }
}

/* ---- statements ---- */

static bool exec_body(ctx *C, const node *b);

static bool assign(ctx *C, const node *t, const jv *v)
{
    if (t->k == E_NAME)
        return var_set(C, t->s, t->sn, v);
    if (t->k == E_ATTR) {
        jv ns;
        if (!var_lookup(C, t->a->s, t->a->sn, &ns) || ns.t != V_NS)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "cannot assign an attribute of '%.*s', which is not a namespace",
                        (int)(t->a->sn > 40 ? 40 : t->a->sn), t->a->s);
        if (t->sn && t->s[0] == '_')
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "a namespace attribute starting with '_'");
        jv k = mkstr(t->s, t->sn);
        return dict_put(C, ns.u.d, &k, v);
    }
    /* a tuple of names */
    jlist *it;
    if (v->t == V_UNDEF)
        return undefined_error(C, v);
    if (!to_items(C, v, &it))
        return false;
    if (it->n != t->nk)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "cannot unpack %zu values into %zu names", it->n, t->nk);
    for (size_t i = 0; i < t->nk; i++)
        if (!var_set(C, t->kids[i]->s, t->kids[i]->sn, &it->v[i]))
            return false;
    return true;
}

static bool emit(ctx *C, const char *s, size_t n)
{
    sb_add(C->out, s, n);
    if (C->out->over)
        return C->out->capped ? rcj_fail(C, RC_ERR_UNSUPPORTED, "renders more than %zu MiB", C->out->max >> 20) : oom(C);
    return rcj_step(C, n);
}

static bool for_frames(ctx *C, const node *x, jlist *it, size_t saved_base, size_t saved_nv);

static bool exec_for(ctx *C, const node *x)
{
    jv seq;
    if (!ev(C, x->b, &seq))
        return false;
    jlist *it;
    if (seq.t == V_NONE || (seq.t != V_LIST && seq.t != V_DICT && seq.t != V_STR && seq.t != V_UNDEF))
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "a for loop over a %s", type_name(&seq));
    if (!to_items(C, &seq, &it))
        return false;
    size_t saved_base = C->base, saved_nv = C->nv;
    C->frames++;
    const bool ok = for_frames(C, x, it, saved_base, saved_nv);
    C->frames--;
    return ok;
}

static bool for_frames(ctx *C, const node *x, jlist *it, size_t saved_base, size_t saved_nv)
{
    /* the loop filter sees the loop variables but not loop */
    if (x->c) {
        jv fl;
        if (!new_list(C, it->n, &fl, false))
            return false;
        size_t w = 0;
        for (size_t i = 0; i < it->n; i++) {
            C->base = C->nv;
            bool ok = assign(C, x->a, &it->v[i]);
            jv t;
            ok = ok && ev(C, x->c, &t);
            C->nv = C->base;
            C->base = saved_base;
            if (!ok)
                return false;
            if (truthy(&t))
                fl.u.l->v[w++] = it->v[i];
        }
        fl.u.l->n = w;
        it = fl.u.l;
    }
    jloop *L = C_alloc(C, sizeof *L);
    if (!L)
        return false;
    L->n = (int64_t)it->n;
    L->items = it;
    bool ok = true;
    for (size_t i = 0; i < it->n && ok; i++) {
        L->i = (int64_t)i;
        C->base = C->nv;
        jv lv = {.t = V_LOOP};
        lv.u.lp = L;
        ok = var_set(C, "loop", 4, &lv) && assign(C, x->a, &it->v[i]) && rcj_step(C, 0) && exec_body(C, x->kids[0]);
        C->nv = C->base;
        C->base = saved_base;
        if (C->flow == 1) {
            C->flow = 0;
            break;
        }
        C->flow = 0;
    }
    C->nv = saved_nv;
    if (ok && it->n == 0 && x->kids[1])
        ok = exec_body(C, x->kids[1]);
    return ok;
}

static bool exec_body(ctx *C, const node *b)
{
    for (size_t i = 0; i < b->nk && !C->flow; i++) {
        const node *x = b->kids[i];
        C->line = x->line;
        if (!rcj_step(C, 0))
            return false;
        switch (x->k) {
        case S_TEXT:
            if (!emit(C, x->s, x->sn))
                return false;
            break;
        case S_OUT: {
            jv v;
            if (!ev(C, x->a, &v))
                return false;
            if (v.t == V_STR) {
                if (!emit(C, v.u.s.p, v.u.s.n))
                    return false;
            } else { /* printed straight into the output, so a value too long for it stops at the limit */
                const size_t n0 = C->out->n;
                if (!rcj_print(C, C->out, &v) || !emit(C, NULL, 0) || !rcj_step(C, C->out->n - n0))
                    return false;
            }
            break;
        }
        case S_IF: {
            bool done = false;
            for (size_t k = 0; k + 1 < x->nk && !done; k += 2) {
                jv c;
                if (!ev(C, x->kids[k], &c))
                    return false;
                if (truthy(&c)) {
                    done = true;
                    if (!exec_body(C, x->kids[k + 1]))
                        return false;
                }
            }
            if (!done && x->c && !exec_body(C, x->c))
                return false;
            break;
        }
        case S_FOR:
            if (!exec_for(C, x))
                return false;
            break;
        case S_SET: {
            jv v;
            if (!ev(C, x->b, &v) || !assign(C, x->a, &v))
                return false;
            break;
        }
        case S_SETBLOCK: {
            sbuf cap = {.max = RC_JINJA_MAX_MEMORY}, *saved = C->out;
            C->out = &cap;
            bool ok = exec_body(C, x->b);
            C->out = saved;
            jv v;
            if (!ok) {
                free(cap.p);
                return false;
            }
            if (!sb_done(C, &cap, &v) || !assign(C, x->a, &v))
                return false;
            break;
        }
        case S_BREAK: C->flow = 1; break;
        case S_CONTINUE: C->flow = 2; break;
        case S_GENERATION:
            if (!exec_body(C, x->a))
                return false;
            break;
        case S_MACRO: { /* the name holds the macro from here on, in this scope */
            jv m = {.t = V_MACRO};
            m.u.mac = x;
            if (!var_set(C, x->s, x->sn, &m))
                return false;
            break;
        }
        default: return rcj_fail(C, RC_ERR_INTERNAL, "an unknown statement");
        }
    }
    return true;
}

/* a call of a macro by its name: the arguments bound to its parameters (positional, then by name, then the
 * defaults, evaluated in the macro's frame after the parameters before them; a parameter left without one is
 * undefined), its body rendered in a frame of its own that sees the template's variables and not its caller's
 * loop or macro variables, the text it writes the call's value (a str) */
enum { MACRO_CALL_STEPS = 32 };

bool call_macro(ctx *C, const node *x, jv *r)
{
    jv m = k_undef;
    const bool found = var_lookup(C, x->a->s, x->a->sn, &m);
    if (!found || m.t != V_MACRO) {
        if (found)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "'%.*s' is a %s, not a macro", (int)(x->a->sn > 60 ? 60 : x->a->sn),
                            x->a->s, type_name(&m));
        jv u = undef_named(x->a->s, x->a->sn);
        return undefined_error(C, &u);
    }
    /* a call's own work (its frame, the captured text's buffer and string) counted as MACRO_CALL_STEPS steps:
     * counted as one, a tree of 2^30 calls ran 15 s to the step limit in the fuzz harness's ASan build (its
     * timeout is 10 s), 2.1 s at 32 (tools/fuzz/README.md, fuzz_jinja on a 2-core machine) */
    if (!rcj_step(C, (size_t)(MACRO_CALL_STEPS - 1) << 6))
        return false;
    const node *mac = m.u.mac;
    const int nm = (int)(mac->sn > 60 ? 60 : mac->sn);
    args a;
    if (!eval_args(C, x, &a, 0))
        return false;
    if (a.np > mac->nk)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "macro '%.*s' takes not more than %zu argument(s)", nm, mac->s, mac->nk);
    for (size_t k = 0; k < a.nkw; k++) {
        size_t j = 0;
        while (j < mac->nk && !(mac->kids[j]->sn == a.kl[k] && !memcmp(mac->kids[j]->s, a.kn[k], a.kl[k])))
            j++;
        if (j == mac->nk)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "macro '%.*s' has no parameter '%.*s'", nm, mac->s,
                            (int)(a.kl[k] > 60 ? 60 : a.kl[k]), a.kn[k]);
        if (j < a.np)
            return rcj_fail(C, RC_ERR_UNSUPPORTED, "macro '%.*s' got multiple values for parameter '%.*s'", nm, mac->s,
                            (int)(a.kl[k] > 60 ? 60 : a.kl[k]), a.kn[k]);
    }
    if (C->frames >= RC_JINJA_MAX_DEPTH)
        return rcj_fail(C, RC_ERR_UNSUPPORTED, "macro calls nested more than %d deep", RC_JINJA_MAX_DEPTH);
    const size_t saved_base = C->base, saved_nv = C->nv, saved_lo = C->gap_lo, saved_hi = C->gap_hi;
    sbuf cap = {.max = RC_JINJA_MAX_MEMORY}, *saved_out = C->out;
    C->frames++;
    C->gap_lo = C->root_n;
    C->gap_hi = C->nv;
    C->base = C->nv;
    bool ok = true;
    for (size_t j = 0; j < mac->nk && ok; j++) {
        const node *p = mac->kids[j];
        jv v = undef_named(p->s, p->sn);
        bool given = j < a.np;
        if (given)
            v = a.pos[j];
        for (size_t k = 0; k < a.nkw && !given; k++)
            if (p->sn == a.kl[k] && !memcmp(p->s, a.kn[k], a.kl[k])) {
                v = a.kv[k];
                given = true;
            }
        if (!given && p->k == E_KWARG)
            ok = ev(C, p->a, &v);
        ok = ok && var_set(C, p->s, p->sn, &v);
    }
    C->out = &cap;
    ok = ok && exec_body(C, mac->c);
    C->out = saved_out;
    C->flow = 0;
    C->frames--;
    C->nv = saved_nv;
    C->base = saved_base;
    C->gap_lo = saved_lo;
    C->gap_hi = saved_hi;
    if (!ok) {
        free(cap.p);
        return false;
    }
    return sb_done(C, &cap, r);
}

rc_status rc_jinja_render(const rc_jinja *t, const json_t *vars, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    sbuf out = {.max = RC_JINJA_MAX_OUTPUT};
    ctx C = {.J = t, .out = &out, .st = RC_OK};
    C.ar.max = RC_JINJA_MAX_MEMORY;
    bool ok = true;
    if (vars) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)vars, key, val)
        {
            jv v;
            ok = ok && from_json(&C, val, &v, 0) && var_set(&C, key, strlen(key), &v);
        }
    }
    C.base = C.nv;
    ok = ok && exec_body(&C, t->root);
    rc_status st = RC_OK;
    if (!ok) {
        st = C.st != RC_OK ? C.st : RC_ERR_INTERNAL;
        rc_errorf(st, "chat template: %s: %s (line %d)", t->what, C.err, C.line);
        free(out.p);
    } else {
        if (!out.p)
            out.p = calloc(1, 1);
        if (!out.p) {
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
        } else {
            *text = out.p;
            *len = out.n;
        }
    }
    free(C.vars);
    ar_free(&C.ar);
    return st;
}
