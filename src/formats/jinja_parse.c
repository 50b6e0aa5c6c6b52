/* The Jinja subset interpreter (jinja_impl.h): the parser, rc_jinja_parse and
 * the template's other entry points but rendering. */
#include "jinja_impl.h"

/* ======================================================================== */
/* parser                                                                   */
/* ======================================================================== */

typedef struct {
    rc_jinja *J;
    tok *t;
    size_t nt, at;
    int depth, bdepth, eline;
    char err[400];
    rc_status st;
    /* the macros defined so far (a call by one of these names calls the macro), and how many macro bodies the
     * parser is inside */
    const tok *macros[RC_JINJA_MAX_MACROS];
    int nmacros, in_macro;
    int in_for; /* how many for blocks (body or else) the parser is inside */
} parser;

static bool is_macro(const parser *P, const char *s, size_t n)
{
    for (int i = 0; i < P->nmacros; i++)
        if (P->macros[i]->n == n && !memcmp(P->macros[i]->p, s, n))
            return true;
    return false;
}

static bool pfail(parser *P, rc_status st, const char *fmt, ...)
{
    if (P->st != RC_OK)
        return false;
    char m[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    P->st = st;
    P->eline = P->t[P->at < P->nt ? P->at : P->nt - 1].line;
    snprintf(P->err, sizeof P->err, "%s", m);
    return false;
}

static bool unsupported(parser *P, const char *what, const char *name, size_t n)
{
    return pfail(P, RC_ERR_UNSUPPORTED, "unsupported Jinja %s '%.*s'", what, (int)(n > 60 ? 60 : n), name);
}

static const tok *cur(const parser *P) { return &P->t[P->at]; }
static bool op_is(const tok *t, const char *o) { return t->k == T_OP && t->n == strlen(o) && !memcmp(t->p, o, t->n); }
static bool name_is(const tok *t, const char *nm)
{
    return t->k == T_NAME && t->n == strlen(nm) && !memcmp(t->p, nm, t->n);
}
bool sn_is(const char *s, size_t n, const char *w) { return n == strlen(w) && !memcmp(s, w, n); }

static node *mk(parser *P, nkind k)
{
    node *x = ar_alloc(&P->J->ar, sizeof *x);
    if (!x) {
        pfail(P, RC_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memset(x, 0, sizeof *x);
    x->k = (uint8_t)k;
    x->line = cur(P)->line;
    return x;
}

/* growable child lists (built with realloc'd temporaries, then copied to the arena) */
typedef struct {
    node **v;
    size_t n, c;
    uint8_t *ops;
} kids;

static bool kadd(parser *P, kids *k, node *x, uint8_t op)
{
    if (!x)
        return false;
    if (k->n == k->c) {
        size_t c = k->c ? 2 * k->c : 8;
        node **q = realloc(k->v, c * sizeof *q);
        uint8_t *o = q ? realloc(k->ops, c) : NULL;
        if (q)
            k->v = q;
        if (!q || !o)
            return pfail(P, RC_ERR_NOMEM, "out of memory");
        k->ops = o;
        k->c = c;
    }
    k->ops[k->n] = op;
    k->v[k->n++] = x;
    return true;
}

static bool kput(parser *P, kids *k, node *x)
{
    bool ok = P->st == RC_OK;
    if (ok && k->n) {
        x->kids = ar_alloc(&P->J->ar, k->n * sizeof *x->kids);
        x->ops = ar_alloc(&P->J->ar, k->n);
        if (!x->kids || !x->ops)
            ok = pfail(P, RC_ERR_NOMEM, "out of memory");
        else {
            memcpy(x->kids, k->v, k->n * sizeof *x->kids);
            memcpy(x->ops, k->ops, k->n);
            x->nk = k->n;
        }
    }
    free(k->v);
    free(k->ops);
    memset(k, 0, sizeof *k);
    return ok;
}

static bool expect_op(parser *P, const char *o)
{
    if (!op_is(cur(P), o))
        return pfail(P, RC_ERR_UNSUPPORTED, "expected '%s'", o);
    P->at++;
    return true;
}

int find_name(const char *const *list, size_t n, const char *s, size_t sn)
{
    for (size_t i = 0; i < n; i++)
        if (sn_is(s, sn, list[i]))
            return (int)i;
    return -1;
}

static uint64_t name_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* the names a template reads: an open-addressing set (NULL slots free), at most half full */
static bool note_name(parser *P, const char *s, size_t n)
{
    rc_jinja *J = P->J;
    if (2 * (J->nnames + 1) > J->cnames) {
        size_t c = J->cnames ? 2 * J->cnames : 64;
        const char **q = calloc(c, sizeof *q);
        size_t *l = q ? calloc(c, sizeof *l) : NULL;
        if (!q || !l) {
            free(q);
            return pfail(P, RC_ERR_NOMEM, "out of memory");
        }
        for (size_t i = 0; i < J->cnames; i++)
            if (J->names[i]) {
                size_t at = name_hash(J->names[i], J->name_lens[i]) & (c - 1);
                while (q[at])
                    at = (at + 1) & (c - 1);
                q[at] = J->names[i];
                l[at] = J->name_lens[i];
            }
        free(J->names);
        free(J->name_lens);
        J->names = q;
        J->name_lens = l;
        J->cnames = c;
    }
    size_t at = name_hash(s, n) & (J->cnames - 1);
    while (J->names[at]) {
        if (J->name_lens[at] == n && !memcmp(J->names[at], s, n))
            return true;
        at = (at + 1) & (J->cnames - 1);
    }
    J->names[at] = s;
    J->name_lens[at] = n;
    J->nnames++;
    return true;
}

static node *p_expr(parser *P, bool condexpr);
static node *p_or(parser *P);
static node *p_unary(parser *P, bool with_filter);
static node *p_primary(parser *P);
static node *p_postfix(parser *P, node *x);

static bool enter(parser *P)
{
    if (++P->depth > RC_JINJA_MAX_DEPTH)
        return pfail(P, RC_ERR_UNSUPPORTED, "expressions nested more than %d deep", RC_JINJA_MAX_DEPTH);
    return true;
}

/* call arguments after '(' : positional, then name=value */
static bool p_args(parser *P, kids *k)
{
    if (!expect_op(P, "("))
        return false;
    bool kw = false;
    while (!op_is(cur(P), ")")) {
        if (k->n && !expect_op(P, ","))
            return false;
        if (op_is(cur(P), ")"))
            break;
        if (op_is(cur(P), "*") || op_is(cur(P), "**"))
            return unsupported(P, "construct", "*args / **kwargs", 18);
        if (cur(P)->k == T_NAME && op_is(&P->t[P->at + 1], "=")) {
            node *x = mk(P, E_KWARG);
            if (!x)
                return false;
            x->s = cur(P)->p;
            x->sn = cur(P)->n;
            P->at += 2;
            x->a = p_expr(P, true);
            if (!x->a || !kadd(P, k, x, 0))
                return false;
            kw = true;
        } else {
            if (kw)
                return pfail(P, RC_ERR_UNSUPPORTED, "a positional argument after a keyword argument");
            if (!kadd(P, k, p_expr(P, true), 0))
                return false;
        }
    }
    P->at++;
    return true;
}

static node *p_tuple_or_expr(parser *P, bool condexpr, bool explicit_parens);

static node *p_primary(parser *P)
{
    if (!enter(P))
        return NULL;
    const tok *t = cur(P);
    node *x = NULL;
    if (t->k == T_NAME) {
        static const char *const kw[] = {"and", "or", "not", "in", "is", "if", "else"};
        if (FIND(kw, t->p, t->n) >= 0) {
            pfail(P, RC_ERR_UNSUPPORTED, "unexpected '%.*s'", (int)t->n, t->p);
            return NULL;
        }
        if (!(x = mk(P, E_LIT)))
            return NULL;
        if (sn_is(t->p, t->n, "true") || sn_is(t->p, t->n, "True")) {
            x->lt = 4;
            x->li = 1;
        } else if (sn_is(t->p, t->n, "false") || sn_is(t->p, t->n, "False")) {
            x->lt = 4;
        } else if (sn_is(t->p, t->n, "none") || sn_is(t->p, t->n, "None")) {
            x->lt = 5;
        } else {
            x->k = E_NAME;
            x->s = t->p;
            x->sn = t->n;
            /* the names jinja2 gives a macro's body (its caller's block, extra arguments) */
            static const char *const mnames[] = {"caller", "varargs", "kwargs"};
            if (P->in_macro && FIND(mnames, t->p, t->n) >= 0) {
                unsupported(P, "construct", t->p, t->n);
                return NULL;
            }
            if (!note_name(P, t->p, t->n))
                return NULL;
        }
        P->at++;
    } else if (t->k == T_STR) {
        /* adjacent literals are one string */
        size_t total = 0, j = P->at;
        while (P->t[j].k == T_STR)
            total += P->t[j++].n;
        char *b = ar_alloc(&P->J->ar, total + 1);
        if (!b) {
            pfail(P, RC_ERR_NOMEM, "out of memory");
            return NULL;
        }
        size_t w = 0;
        while (cur(P)->k == T_STR) {
            memcpy(b + w, cur(P)->p, cur(P)->n);
            w += cur(P)->n;
            P->at++;
        }
        b[w] = '\0';
        if (!(x = mk(P, E_LIT)))
            return NULL;
        x->lt = 1;
        x->s = b;
        x->sn = w;
    } else if (t->k == T_INT || t->k == T_FLOAT) {
        if (!(x = mk(P, E_LIT)))
            return NULL;
        x->lt = t->k == T_INT ? 2 : 3;
        x->li = t->i;
        x->lf = t->f;
        P->at++;
    } else if (op_is(t, "(")) {
        P->at++;
        x = p_tuple_or_expr(P, true, true);
        if (!x || !expect_op(P, ")"))
            return NULL;
    } else if (op_is(t, "[")) {
        P->at++;
        kids k = {0};
        if (!(x = mk(P, E_LIST)))
            return NULL;
        while (!op_is(cur(P), "]")) {
            if (k.n && !expect_op(P, ","))
                break;
            if (op_is(cur(P), "]"))
                break;
            if (!kadd(P, &k, p_expr(P, true), 0))
                break;
        }
        if (!kput(P, &k, x) || !expect_op(P, "]"))
            return NULL;
    } else if (op_is(t, "{")) {
        P->at++;
        kids k = {0};
        if (!(x = mk(P, E_DICT)))
            return NULL;
        while (!op_is(cur(P), "}")) {
            if (k.n && !expect_op(P, ","))
                break;
            if (op_is(cur(P), "}"))
                break;
            if (!kadd(P, &k, p_expr(P, true), 0) || !expect_op(P, ":") || !kadd(P, &k, p_expr(P, true), 0))
                break;
        }
        if (!kput(P, &k, x) || !expect_op(P, "}"))
            return NULL;
    } else {
        if (t->k == T_OP)
            pfail(P, RC_ERR_UNSUPPORTED, "unexpected '%.*s'", (int)t->n, t->p);
        else
            pfail(P, RC_ERR_UNSUPPORTED, "an expression ends early");
        return NULL;
    }
    P->depth--;
    return x;
}

/* x[...]: an index or a slice */
static node *p_subscript(parser *P, node *x)
{
    P->at++; /* [ */
    node *parts[3] = {NULL, NULL, NULL};
    int np = 0;
    bool slice = false;
    for (;;) {
        if (op_is(cur(P), ":")) {
            slice = true;
            if (np >= 2) {
                pfail(P, RC_ERR_UNSUPPORTED, "a slice with more than three parts");
                return NULL;
            }
            if (!parts[np] && !(parts[np] = mk(P, E_NONE_ARG)))
                return NULL;
            np++;
            P->at++;
            continue;
        }
        if (op_is(cur(P), "]"))
            break;
        if (parts[np]) {
            pfail(P, RC_ERR_UNSUPPORTED, "expected ']'");
            return NULL;
        }
        if (!(parts[np] = p_expr(P, true)))
            return NULL;
    }
    P->at++;
    node *y = mk(P, slice ? E_SLICE : E_ITEM);
    if (!y)
        return NULL;
    y->a = x;
    if (!slice) {
        if (!parts[0]) {
            pfail(P, RC_ERR_UNSUPPORTED, "an empty subscript");
            return NULL;
        }
        y->b = parts[0];
        return y;
    }
    for (int i = 0; i < 3; i++)
        if (!parts[i] && !(parts[i] = mk(P, E_NONE_ARG)))
            return NULL;
    y->kids = ar_alloc(&P->J->ar, 3 * sizeof *y->kids);
    if (!y->kids) {
        pfail(P, RC_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(y->kids, parts, sizeof parts);
    y->nk = 3;
    return y;
}

static node *p_call(parser *P, node *callee)
{
    node *y = mk(P, E_CALL);
    if (!y)
        return NULL;
    y->a = callee;
    if (callee->k == E_NAME && is_macro(P, callee->s, callee->sn)) {
        y->id = FN_MACRO;
    } else if (callee->k == E_NAME) {
        int f = FIND(k_functions, callee->s, callee->sn);
        if (f < 0) {
            static const char *const jinja_globals[] = {"lipsum", "cycler", "joiner", "caller", "super", "self",
                                                        "varargs", "kwargs"};
            (void)jinja_globals;
            unsupported(P, "function", callee->s, callee->sn);
            return NULL;
        }
        y->id = f;
    } else if (callee->k == E_ATTR) {
        int m = FIND(k_methods, callee->s, callee->sn);
        if (m < 0) {
            char nm[80];
            snprintf(nm, sizeof nm, "%.*s()", (int)(callee->sn > 60 ? 60 : callee->sn), callee->s);
            unsupported(P, "method", nm, strlen(nm));
            return NULL;
        }
        y->id = 100 + m;
    } else {
        unsupported(P, "construct", "a call of an expression", 24);
        return NULL;
    }
    kids k = {0};
    bool args_ok = p_args(P, &k); /* kput frees k either way */
        if (!kput(P, &k, y) || !args_ok)
        return NULL;
    return y;
}

static node *p_postfix(parser *P, node *x)
{
    while (x) {
        const tok *t = cur(P);
        if (op_is(t, ".")) {
            P->at++;
            const tok *nm = cur(P);
            node *y = NULL;
            if (nm->k == T_NAME) {
                if (!(y = mk(P, E_ATTR)))
                    return NULL;
                y->s = nm->p;
                y->sn = nm->n;
            } else if (nm->k == T_INT) {
                if (!(y = mk(P, E_ITEM)) || !(y->b = mk(P, E_LIT)))
                    return NULL;
                y->b->lt = 2;
                y->b->li = nm->i;
            } else {
                pfail(P, RC_ERR_UNSUPPORTED, "an attribute that is not a name");
                return NULL;
            }
            y->a = x;
            P->at++;
            x = y;
        } else if (op_is(t, "[")) {
            x = p_subscript(P, x);
        } else if (op_is(t, "(")) {
            x = p_call(P, x);
        } else {
            break;
        }
    }
    return x;
}

static node *p_filter(parser *P, node *x)
{
    P->at++; /* | */
    const tok *nm = cur(P);
    if (nm->k != T_NAME) {
        pfail(P, RC_ERR_UNSUPPORTED, "a filter that is not a name");
        return NULL;
    }
    int f = FIND(k_filters, nm->p, nm->n);
    if (f < 0) {
        unsupported(P, "filter", nm->p, nm->n);
        return NULL;
    }
    P->at++;
    if (op_is(cur(P), ".")) {
        unsupported(P, "construct", "a dotted filter name", 20);
        return NULL;
    }
    node *y = mk(P, E_FILTER);
    if (!y)
        return NULL;
    y->a = x;
    y->s = nm->p;
    y->sn = nm->n;
    y->id = f;
    if (op_is(cur(P), "(")) {
        kids k = {0};
        bool args_ok = p_args(P, &k); /* kput frees k either way */
        if (!kput(P, &k, y) || !args_ok)
            return NULL;
    }
    return y;
}

static node *p_test(parser *P, node *x)
{
    P->at++; /* is */
    bool neg = false;
    if (name_is(cur(P), "not")) {
        neg = true;
        P->at++;
    }
    const tok *nm = cur(P);
    int f = -1;
    if (nm->k == T_NAME || nm->k == T_OP)
        f = FIND(k_tests, nm->p, nm->n);
    if (nm->k != T_NAME && f < 0) {
        pfail(P, RC_ERR_UNSUPPORTED, "a test that is not a name");
        return NULL;
    }
    if (f < 0) {
        unsupported(P, "test", nm->p, nm->n);
        return NULL;
    }
    P->at++;
    node *y = mk(P, E_TEST);
    if (!y)
        return NULL;
    y->a = x;
    y->s = nm->p;
    y->sn = nm->n;
    y->id = f;
    y->neg = neg;
    const tok *n2 = cur(P);
    if (op_is(n2, "(")) {
        kids k = {0};
        bool args_ok = p_args(P, &k); /* kput frees k either way */
        if (!kput(P, &k, y) || !args_ok)
            return NULL;
    } else if ((n2->k == T_NAME || n2->k == T_STR || n2->k == T_INT || n2->k == T_FLOAT || op_is(n2, "[") ||
                op_is(n2, "{")) &&
               !name_is(n2, "else") && !name_is(n2, "or") && !name_is(n2, "and")) {
        if (name_is(n2, "is")) {
            pfail(P, RC_ERR_UNSUPPORTED, "chained tests");
            return NULL;
        }
        node *arg = p_postfix(P, p_primary(P));
        if (!arg)
            return NULL;
        kids k = {0};
        bool added = kadd(P, &k, arg, 0);
        if (!kput(P, &k, y) || !added)
            return NULL;
    }
    return y;
}

static node *p_unary(parser *P, bool with_filter)
{
    if (!enter(P))
        return NULL;
    node *x;
    const tok *t = cur(P);
    if (op_is(t, "-") || op_is(t, "+")) {
        bool neg = op_is(t, "-");
        P->at++;
        node *a = p_unary(P, false);
        if (!a || !(x = mk(P, neg ? E_NEG : E_POS)))
            return NULL;
        x->a = a;
    } else {
        x = p_primary(P);
    }
    x = p_postfix(P, x);
    while (x && with_filter) {
        if (op_is(cur(P), "|"))
            x = p_filter(P, x);
        else if (name_is(cur(P), "is"))
            x = p_test(P, x);
        else if (op_is(cur(P), "("))
            x = p_call(P, x);
        else
            break;
    }
    if (x)
        P->depth--;
    return x;
}

static node *binop(parser *P, nkind k, uint8_t op, node *a, node *b)
{
    if (!a || !b)
        return NULL;
    node *x = mk(P, k);
    if (!x)
        return NULL;
    x->op = op;
    x->a = a;
    x->b = b;
    return x;
}

static node *p_pow(parser *P)
{
    node *x = p_unary(P, true);
    while (x && op_is(cur(P), "**")) {
        P->at++;
        x = binop(P, E_BIN, OP_POW, x, p_unary(P, true));
    }
    return x;
}

static node *p_math2(parser *P)
{
    node *x = p_pow(P);
    for (;;) {
        const tok *t = cur(P);
        uint8_t op = op_is(t, "*") ? OP_MUL : op_is(t, "/") ? OP_DIV : op_is(t, "//") ? OP_FLOORDIV : op_is(t, "%") ? OP_MOD : 0;
        if (!x || !op)
            return x;
        P->at++;
        x = binop(P, E_BIN, op, x, p_pow(P));
    }
}

static node *p_concat(parser *P)
{
    node *x = p_math2(P);
    while (x && op_is(cur(P), "~")) {
        P->at++;
        x = binop(P, E_CONCAT, 0, x, p_math2(P));
    }
    return x;
}

static node *p_math1(parser *P)
{
    node *x = p_concat(P);
    for (;;) {
        const tok *t = cur(P);
        uint8_t op = op_is(t, "+") ? OP_ADD : op_is(t, "-") ? OP_SUB : 0;
        if (!x || !op)
            return x;
        P->at++;
        x = binop(P, E_BIN, op, x, p_concat(P));
    }
}

static node *p_compare(parser *P)
{
    node *x = p_math1(P);
    if (!x)
        return NULL;
    kids k = {0};
    for (;;) {
        const tok *t = cur(P);
        uint8_t op = op_is(t, "==") ? CMP_EQ : op_is(t, "!=") ? CMP_NE : op_is(t, "<") ? CMP_LT : op_is(t, "<=") ? CMP_LE
                     : op_is(t, ">") ? CMP_GT : op_is(t, ">=") ? CMP_GE : name_is(t, "in") ? CMP_IN : 0;
        if (!op && name_is(t, "not") && name_is(&P->t[P->at + 1], "in")) {
            op = CMP_NOTIN;
            P->at++;
        }
        if (!op)
            break;
        P->at++;
        if (!k.n && !kadd(P, &k, x, 0))
            return NULL;
        if (!kadd(P, &k, p_math1(P), op)) {
            free(k.v);
            free(k.ops);
            return NULL;
        }
    }
    if (!k.n)
        return x;
    node *y = mk(P, E_COMPARE);
    if (!y || !kput(P, &k, y))
        return NULL;
    return y;
}

static node *p_not(parser *P)
{
    if (name_is(cur(P), "not")) {
        if (!enter(P))
            return NULL;
        P->at++;
        node *a = p_not(P);
        node *x = a ? mk(P, E_NOT) : NULL;
        if (!x)
            return NULL;
        x->a = a;
        P->depth--;
        return x;
    }
    return p_compare(P);
}

static node *p_and(parser *P)
{
    node *x = p_not(P);
    while (x && name_is(cur(P), "and")) {
        P->at++;
        x = binop(P, E_AND, 0, x, p_not(P));
    }
    return x;
}

static node *p_or(parser *P)
{
    node *x = p_and(P);
    while (x && name_is(cur(P), "or")) {
        P->at++;
        x = binop(P, E_OR, 0, x, p_and(P));
    }
    return x;
}

static node *p_expr(parser *P, bool condexpr)
{
    if (!enter(P))
        return NULL;
    node *x = p_or(P);
    while (condexpr && x && name_is(cur(P), "if")) {
        P->at++;
        node *c = p_or(P), *e = NULL;
        if (!c)
            return NULL;
        if (name_is(cur(P), "else")) {
            P->at++;
            if (!(e = p_expr(P, true)))
                return NULL;
        }
        node *y = mk(P, E_COND);
        if (!y)
            return NULL;
        y->a = x;
        y->b = c;
        y->c = e;
        x = y;
    }
    if (x)
        P->depth--;
    return x;
}

/* expr or a tuple expr, expr, ... (in parentheses: a tuple needs a comma) */
static node *p_tuple_or_expr(parser *P, bool condexpr, bool explicit_parens)
{
    if (explicit_parens && op_is(cur(P), ")")) {
        return mk(P, E_TUPLE);
    }
    node *x = p_expr(P, condexpr);
    if (!x || !op_is(cur(P), ","))
        return x;
    kids k = {0};
    kadd(P, &k, x, 0);
    while (op_is(cur(P), ",")) {
        P->at++;
        const tok *t = cur(P);
        if (op_is(t, ")") || t->k == T_VAR_END || t->k == T_BLOCK_END || name_is(t, "in") || name_is(t, "recursive"))
            break;
        if (!kadd(P, &k, p_expr(P, condexpr), 0)) {
            free(k.v);
            free(k.ops);
            return NULL;
        }
    }
    node *y = mk(P, E_TUPLE);
    if (!y || !kput(P, &k, y))
        return NULL;
    return y;
}

/* an assignment target: name, name.attr (set only), or names separated by commas */
static node *p_target(parser *P, bool allow_attr)
{
    kids k = {0};
    bool tuple = false;
    for (;;) {
        const tok *t = cur(P);
        bool paren = op_is(t, "(");
        if (paren) {
            unsupported(P, "construct", "a parenthesised assignment target", 33);
            break;
        }
        if (t->k != T_NAME) {
            pfail(P, RC_ERR_UNSUPPORTED, "an assignment target that is not a name");
            break;
        }
        static const char *const consts[] = {"true", "false", "none", "True", "False", "None"};
        if (FIND(consts, t->p, t->n) >= 0) {
            pfail(P, RC_ERR_UNSUPPORTED, "cannot assign to '%.*s'", (int)t->n, t->p);
            break;
        }
        node *x = mk(P, E_NAME);
        if (!x)
            break;
        x->s = t->p;
        x->sn = t->n;
        P->at++;
        if (allow_attr && op_is(cur(P), ".") && cur(P)[1].k == T_NAME) {
            node *y = mk(P, E_ATTR);
            if (!y)
                break;
            y->a = x;
            y->s = cur(P)[1].p;
            y->sn = cur(P)[1].n;
            P->at += 2;
            x = y;
            if (!note_name(P, x->a->s, x->a->sn))
                break;
        }
        if (!kadd(P, &k, x, 0))
            break;
        if (!op_is(cur(P), ","))
            break;
        tuple = true;
        P->at++;
    }
    if (P->st != RC_OK) {
        free(k.v);
        free(k.ops);
        return NULL;
    }
    if (!tuple) {
        node *x = k.v[0];
        free(k.v);
        free(k.ops);
        return x;
    }
    for (size_t i = 0; i < k.n; i++)
        if (k.v[i]->k != E_NAME) {
            free(k.v);
            free(k.ops);
            pfail(P, RC_ERR_UNSUPPORTED, "a namespace attribute in a tuple target");
            return NULL;
        }
    node *y = mk(P, E_TUPLE);
    if (!y || !kput(P, &k, y))
        return NULL;
    return y;
}

static bool end_block(parser *P)
{
    if (cur(P)->k != T_BLOCK_END)
        return pfail(P, RC_ERR_UNSUPPORTED, "expected the end of the tag, found '%.*s'", (int)(cur(P)->n > 40 ? 40 : cur(P)->n),
                     cur(P)->p);
    P->at++;
    return true;
}

/* statements until a block tag whose first word is one of `ends` (NULL-terminated); *which its index */
static node *p_body(parser *P, const char *const *ends, int *which);

static const char *const k_refused_tags[] = {"call",    "filter", "include", "import", "from",
                                             "extends", "block",  "with",   "raw",     "autoescape", "do",
                                             "endraw", "trans",   "pluralize", "print"};

static node *p_stmt(parser *P)
{
    const tok *t = cur(P); /* after {% */
    if (t->k != T_NAME) {
        pfail(P, RC_ERR_UNSUPPORTED, "a block tag without a statement");
        return NULL;
    }
    if (++P->bdepth > RC_JINJA_MAX_DEPTH) {
        pfail(P, RC_ERR_UNSUPPORTED, "blocks nested more than %d deep", RC_JINJA_MAX_DEPTH);
        return NULL;
    }
    node *x = NULL;
    if (name_is(t, "if")) {
        if (!(x = mk(P, S_IF)))
            return NULL;
        P->at++;
        kids k = {0};
        for (;;) {
            node *c = p_tuple_or_expr(P, true, false);
            if (!c || !end_block(P)) {
                free(k.v);
                free(k.ops);
                return NULL;
            }
            static const char *const ends[] = {"elif", "else", "endif", NULL};
            int w;
            node *body = p_body(P, ends, &w);
            if (!body || !kadd(P, &k, c, 0) || !kadd(P, &k, body, 0)) {
                free(k.v);
                free(k.ops);
                return NULL;
            }
            P->at++; /* the end word */
            if (w == 0)
                continue;
            if (w == 1) {
                if (!end_block(P))
                    break;
                static const char *const ends2[] = {"endif", NULL};
                if (!(x->c = p_body(P, ends2, &w)))
                    break;
                P->at++;
            }
            end_block(P);
            break;
        }
        if (!kput(P, &k, x))
            return NULL;
    } else if (name_is(t, "for")) {
        if (!(x = mk(P, S_FOR)))
            return NULL;
        P->at++;
        if (!(x->a = p_target(P, false)))
            return NULL;
        if (!name_is(cur(P), "in")) {
            pfail(P, RC_ERR_UNSUPPORTED, "expected 'in' in a for tag");
            return NULL;
        }
        P->at++;
        if (!(x->b = p_tuple_or_expr(P, false, false)))
            return NULL;
        if (name_is(cur(P), "if")) {
            P->at++;
            if (!(x->c = p_expr(P, true)))
                return NULL;
        }
        if (name_is(cur(P), "recursive")) {
            unsupported(P, "construct", "recursive", 9);
            return NULL;
        }
        if (!end_block(P))
            return NULL;
        static const char *const ends[] = {"else", "endfor", NULL};
        int w;
        P->in_for++;
        node *body = p_body(P, ends, &w), *els = NULL;
        if (!body) {
            P->in_for--;
            return NULL;
        }
        P->at++;
        if (w == 0) {
            if (!end_block(P)) {
                P->in_for--;
                return NULL;
            }
            static const char *const ends2[] = {"endfor", NULL};
            els = p_body(P, ends2, &w);
            if (!els) {
                P->in_for--;
                return NULL;
            }
            P->at++;
        }
        P->in_for--;
        if (!end_block(P))
            return NULL;
        x->kids = ar_alloc(&P->J->ar, 2 * sizeof *x->kids);
        if (!x->kids) {
            pfail(P, RC_ERR_NOMEM, "out of memory");
            return NULL;
        }
        x->kids[0] = body;
        x->kids[1] = els;
        x->nk = 2;
    } else if (name_is(t, "set")) {
        P->at++;
        node *target = p_target(P, true);
        if (!target)
            return NULL;
        if (op_is(cur(P), "=")) {
            P->at++;
            if (!(x = mk(P, S_SET)))
                return NULL;
            x->a = target;
            if (!(x->b = p_tuple_or_expr(P, true, false)) || !end_block(P))
                return NULL;
        } else {
            if (op_is(cur(P), "|")) {
                unsupported(P, "construct", "a filtered set block", 20);
                return NULL;
            }
            if (target->k != E_NAME) {
                pfail(P, RC_ERR_UNSUPPORTED, "a set block assigns one name");
                return NULL;
            }
            if (!end_block(P) || !(x = mk(P, S_SETBLOCK)))
                return NULL;
            x->a = target;
            static const char *const ends[] = {"endset", NULL};
            int w;
            if (!(x->b = p_body(P, ends, &w)))
                return NULL;
            P->at++;
            if (!end_block(P))
                return NULL;
        }
    } else if (name_is(t, "macro")) {
        /* {% macro name(p, q=default, ...) %}body{% endmacro %} */
        if (P->in_for || P->in_macro) {
            /* jinja2's macro sees the variables where it is defined (a loop's, an enclosing macro's); the
             * interpreter gives a macro's body the template's variables only, so such a definition is refused
             * rather than read differently */
            unsupported(P, "construct", P->in_for ? "macro inside a for loop" : "macro inside a macro",
                        P->in_for ? 23 : 20);
            return NULL;
        }
        if (!(x = mk(P, S_MACRO)))
            return NULL;
        P->at++;
        const tok *nm = cur(P);
        if (nm->k != T_NAME) {
            pfail(P, RC_ERR_UNSUPPORTED, "a macro without a name");
            return NULL;
        }
        x->s = nm->p;
        x->sn = nm->n;
        P->at++;
        if (!expect_op(P, "("))
            return NULL;
        kids k = {0};
        bool with_default = false;
        while (!op_is(cur(P), ")")) {
            if (k.n && !expect_op(P, ","))
                break;
            if (op_is(cur(P), ")"))
                break;
            const tok *pt = cur(P);
            if (pt->k != T_NAME) {
                pfail(P, RC_ERR_UNSUPPORTED, "expected a parameter name in macro '%.*s'", (int)(x->sn > 60 ? 60 : x->sn),
                      x->s);
                break;
            }
            static const char *const mnames[] = {"caller", "varargs", "kwargs"};
            if (FIND(mnames, pt->p, pt->n) >= 0) {
                unsupported(P, "construct", pt->p, pt->n);
                break;
            }
            bool dup = false;
            for (size_t i = 0; i < k.n; i++)
                dup = dup || (k.v[i]->sn == pt->n && !memcmp(k.v[i]->s, pt->p, pt->n));
            if (dup) {
                pfail(P, RC_ERR_UNSUPPORTED, "a parameter named twice in macro '%.*s'", (int)(x->sn > 60 ? 60 : x->sn),
                      x->s);
                break;
            }
            node *pn = mk(P, E_NAME);
            if (!pn)
                break;
            pn->s = pt->p;
            pn->sn = pt->n;
            P->at++;
            if (op_is(cur(P), "=")) {
                P->at++;
                pn->k = E_KWARG;
                if (!(pn->a = p_expr(P, true)))
                    break;
                with_default = true;
            } else if (with_default) {
                pfail(P, RC_ERR_UNSUPPORTED, "a parameter without a default after one with a default in macro '%.*s'",
                      (int)(x->sn > 60 ? 60 : x->sn), x->s);
                break;
            }
            if (!kadd(P, &k, pn, 0))
                break;
        }
        if (!kput(P, &k, x)) /* frees k, and fails after an error above */
            return NULL;
        P->at++; /* ')' */
        if (!end_block(P))
            return NULL;
        /* known from here on, its own body included (a macro may call itself) */
        if (!is_macro(P, x->s, x->sn)) {
            if (P->nmacros == RC_JINJA_MAX_MACROS) {
                pfail(P, RC_ERR_UNSUPPORTED, "more than %d macros", RC_JINJA_MAX_MACROS);
                return NULL;
            }
            P->macros[P->nmacros++] = nm;
        }
        static const char *const ends[] = {"endmacro", NULL};
        int w;
        P->in_macro++;
        x->c = p_body(P, ends, &w);
        P->in_macro--;
        if (!x->c)
            return NULL;
        P->at++;
        if (!end_block(P))
            return NULL;
    } else if (name_is(t, "break") || name_is(t, "continue")) {
        if (!(x = mk(P, name_is(t, "break") ? S_BREAK : S_CONTINUE)))
            return NULL;
        P->at++;
        if (!end_block(P))
            return NULL;
    } else if (name_is(t, "generation")) {
        if (!(x = mk(P, S_GENERATION)))
            return NULL;
        P->at++;
        if (!end_block(P))
            return NULL;
        static const char *const ends[] = {"endgeneration", NULL};
        int w;
        if (!(x->a = p_body(P, ends, &w)))
            return NULL;
        P->at++;
        if (!end_block(P))
            return NULL;
    } else if (FIND(k_refused_tags, t->p, t->n) >= 0) {
        unsupported(P, "construct", t->p, t->n);
        return NULL;
    } else {
        pfail(P, RC_ERR_UNSUPPORTED, "an unknown or misplaced tag '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p);
        return NULL;
    }
    P->bdepth--;
    return x;
}

static node *p_body(parser *P, const char *const *ends, int *which)
{
    node *body = mk(P, S_BODY);
    if (!body)
        return NULL;
    kids k = {0};
    *which = -1;
    for (;;) {
        const tok *t = cur(P);
        if (t->k == T_EOF) {
            if (ends) {
                pfail(P, RC_ERR_UNSUPPORTED, "a block left open (expected '%s')", ends[0]);
                break;
            }
            break;
        }
        if (t->k == T_DATA) {
            node *x = mk(P, S_TEXT);
            if (!x)
                break;
            x->s = t->p;
            x->sn = t->n;
            P->at++;
            if (!kadd(P, &k, x, 0))
                break;
        } else if (t->k == T_VAR_BEGIN) {
            P->at++;
            node *x = mk(P, S_OUT);
            if (!x || !(x->a = p_tuple_or_expr(P, true, false)))
                break;
            if (cur(P)->k != T_VAR_END) {
                pfail(P, RC_ERR_UNSUPPORTED, "expected '}}', found '%.*s'", (int)(cur(P)->n > 40 ? 40 : cur(P)->n),
                      cur(P)->p);
                break;
            }
            P->at++;
            if (!kadd(P, &k, x, 0))
                break;
        } else if (t->k == T_BLOCK_BEGIN) {
            const tok *w = &P->t[P->at + 1];
            int hit = -1;
            for (int e = 0; ends && ends[e] && hit < 0; e++)
                if (name_is(w, ends[e]))
                    hit = e;
            if (hit >= 0) {
                P->at++; /* at the end word */
                *which = hit;
                break;
            }
            static const char *const stray[] = {"elif", "else", "endif", "endfor", "endset", "endgeneration", "endmacro"};
            if (w->k == T_NAME && FIND(stray, w->p, w->n) >= 0) {
                P->at++;
                pfail(P, RC_ERR_UNSUPPORTED, "an unexpected '%.*s'", (int)w->n, w->p);
                break;
            }
            P->at++;
            if (!kadd(P, &k, p_stmt(P), 0))
                break;
        } else {
            pfail(P, RC_ERR_UNSUPPORTED, "unexpected '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p);
            break;
        }
    }
    if (!kput(P, &k, body))
        return NULL;
    return body;
}

void rc_jinja_free(rc_jinja *t)
{
    if (!t)
        return;
    ar_free(&t->ar);
    free(t->names);
    free(t->name_lens);
    free(t->what_copy);
    free(t);
}

bool rc_jinja_uses(const rc_jinja *t, const char *name)
{
    size_t n = strlen(name);
    if (!t->cnames)
        return false;
    size_t at = name_hash(name, n) & (t->cnames - 1);
    while (t->names[at]) {
        if (t->name_lens[at] == n && !memcmp(t->names[at], name, n))
            return true;
        at = (at + 1) & (t->cnames - 1);
    }
    return false;
}

void rc_jinja_set_time(rc_jinja *t, const struct tm *tm)
{
    t->fixed_time = tm != NULL;
    if (tm)
        t->tm = *tm;
}

rc_status rc_jinja_parse(const char *src, size_t len, const char *what, rc_jinja **out)
{
    *out = NULL;
    if (len > RC_JINJA_MAX_SOURCE)
        return rc_errorf(RC_ERR_UNSUPPORTED, "chat template: %s is %zu bytes, more than the %zu ratiocheck reads", what,
                         len, RC_JINJA_MAX_SOURCE);
    size_t bad;
    if (!rc_utf8_valid((const unsigned char *)src, len, &bad))
        return rc_errorf(RC_ERR_FORMAT, "chat template: %s is not UTF-8 (byte %zu)", what, bad);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        /* control characters (jinja2 would turn \r, \v, \f, \x1c-\x1e, U+0085, U+2028 and U+2029 into newlines) */
        bool ctl = (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f ||
                   (c == 0xc2 && i + 1 < len && (unsigned char)src[i + 1] == 0x85) ||
                   (c == 0xe2 && i + 2 < len && (unsigned char)src[i + 1] == 0x80 &&
                    ((unsigned char)src[i + 2] == 0xa8 || (unsigned char)src[i + 2] == 0xa9));
        if (ctl) {
            int line = 1 + count_nl(src, i);
            return rc_errorf(RC_ERR_UNSUPPORTED,
                             "chat template: %s has a control character (byte %zu, line %d): only tab and newline are read",
                             what, i, line);
        }
    }
    rc_jinja *J = calloc(1, sizeof *J);
    if (!J)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    J->ar.max = (size_t)64 * RC_JINJA_MAX_SOURCE + ((size_t)1 << 20);
    J->what_copy = strdup(what ? what : "the template");
    J->what = J->what_copy;
    if (!J->what) {
        free(J);
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    lexer L = {.src = src, .len = len, .what = what, .ar = &J->ar, .st = RC_OK};
    rc_status st = RC_OK;
    if (!lx_run(&L)) {
        st = L.st;
        rc_errorf(st, "chat template: %s in %s (line %d)", L.err, J->what, L.eline);
    } else {
        parser P = {.J = J, .t = L.t, .nt = L.nt, .st = RC_OK};
        int w;
        J->root = p_body(&P, NULL, &w);
        if (!J->root || P.st != RC_OK) {
            st = P.st != RC_OK ? P.st : RC_ERR_INTERNAL;
            rc_errorf(st, "chat template: %s in %s (line %d)", P.err, J->what, P.eline);
        }
    }
    free(L.t);
    if (st != RC_OK) {
        rc_jinja_free(J);
        return st;
    }
    *out = J;
    return RC_OK;
}
