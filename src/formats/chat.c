/* Chat templates: recognised by their canonical form, rendered in C (chat.h).
 *
 * The canonical form of a template is what Jinja would output, as a string in
 * which literal text stands for itself and everything computed is a tag
 * \x03...\x04 holding a canonical statement or expression:
 *   \x03=EXPR\x04            an output ({{ EXPR }})
 *   \x03if EXPR\x04 ... \x03elif EXPR\x04 ... \x03else\x04 ... \x03endif\x04
 *   \x03for NAME in EXPR\x04 ... \x03endfor\x04
 *   \x03set NAME=EXPR\x04
 * Template text has no control characters but tab and newline (others are
 * refused), so the form is unambiguous. It is built with Jinja's lexer rules
 * as transformers configures its environment (trim_blocks, lstrip_blocks,
 * keep_trailing_newline off; "-" / "+" whitespace control; Python's Unicode
 * whitespace for \s, rstrip and trim), with:
 *   - string literals decoded (escapes \n \t \\ \' \" only; others refused)
 *     and output literals merged with the text around them;
 *   - {{ a + b + ... }} written as one output per operand (the same text when
 *     every operand is a string, which is the case in the layouts below) and
 *     adjacent string literals of a + chain joined;
 *   - x['key'] written x.key (Jinja looks a dict's key up either way, unless
 *     the key names a dict method);
 *   - every compound expression in parentheses, operators and names as
 *     written.
 * The layouts ratiocheck renders are written below as Jinja templates with
 * two markers, reduced the same way, and compared byte for byte with the
 * model's: @SYS@ matches the default system text (captured), @SKIP@ a branch
 * body that the inputs ratiocheck passes can never reach (no tools, no
 * tool_calls, roles system / user / assistant). */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "tokenizer.h"
#include "util.h"

#define MAX_DEPTH 64 /* nested blocks; nested expressions */
#define TAG_OPEN '\x03'
#define TAG_CLOSE '\x04'
#define MARK_SYS '\x01'
#define MARK_SKIP '\x02'

struct rc_chat {
    rc_chat_kind kind;
    const char *form; /* which layout */
    char *system;     /* default system message (NULL: none) */
    size_t system_len;
    char *bos; /* Llama-3 */
    size_t bos_len;
};

/* ---- growable byte buffer ------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
    bool failed; /* out of memory or over max */
    size_t max;
} buf_t;

static void b_add(buf_t *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (n > b->max || b->n > b->max - n) {
        b->failed = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->failed = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void b_str(buf_t *b, const char *s) { b_add(b, s, strlen(s)); }
static void b_chr(buf_t *b, char c) { b_add(b, &c, 1); }

/* ---- Python's whitespace (str.isspace, the re module's \s) --------------- */

static bool py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

/* the code point at s[0..n) (valid UTF-8, n > 0); *len its bytes */
static uint32_t u8_cp(const unsigned char *s, size_t n, int *len)
{
    int l = s[0] < 0x80 ? 1 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : 4;
    if ((size_t)l > n)
        l = (int)n;
    uint32_t cp = l == 1 ? s[0] : (uint32_t)(s[0] & (0x3f >> (l - 1)));
    for (int i = 1; i < l; i++)
        cp = (cp << 6) | (s[i] & 0x3f);
    *len = l;
    return cp;
}

/* bytes of whitespace at the start of s[0..n) */
static size_t ws_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        int l;
        if (!py_space(u8_cp((const unsigned char *)s + i, n - i, &l)))
            break;
        i += (size_t)l;
    }
    return i;
}

/* bytes of whitespace at the end of s[0..n) */
static size_t ws_suffix(const char *s, size_t n)
{
    size_t e = n;
    while (e > 0) {
        size_t b = e - 1;
        while (b > 0 && ((unsigned char)s[b] & 0xc0) == 0x80 && e - b < 4)
            b--;
        int l;
        if (!py_space(u8_cp((const unsigned char *)s + b, e - b, &l)) || (size_t)l != e - b)
            break;
        e = b;
    }
    return n - e;
}

/* ---- tokens of a tag ------------------------------------------------------- */

typedef enum { TK_NAME, TK_STR, TK_INT, TK_OP } tk_kind;
typedef struct {
    tk_kind k;
    const char *p; /* NAME / INT / OP: the source text */
    size_t n;
    char *s; /* STR: the decoded value */
    size_t sn;
} tk;

/* ---- expressions ------------------------------------------------------------ */

typedef enum { N_NAME, N_STR, N_INT, N_ATTR, N_ITEM, N_FILTER, N_TEST, N_NOT, N_NEG, N_POS, N_BIN, N_ADD } nkind;
typedef struct node {
    nkind k;
    const char *s; /* NAME / INT / ATTR / FILTER / TEST name, BIN operator */
    size_t sn;
    char *str; /* STR value (owned) */
    size_t strn;
    bool neg; /* TEST: "is not" */
    struct node *a, *b;
    struct node **kids; /* ADD operands (owned array) */
    size_t nk;
} node;

typedef struct {
    /* the template */
    const char *src;
    size_t len;
    bool pattern; /* a layout of this file: markers allowed */
    /* the canonical form */
    buf_t out;
    int stack[MAX_DEPTH]; /* open blocks: 1 if, 2 if after else, 3 for */
    int depth;
    /* the current tag */
    tk *t;
    size_t nt, ct, at; /* tokens, capacity, parse position */
    node **nodes;      /* every node of the current tag, to free */
    size_t nn, cn;
    int edepth;
    const char *why; /* why the template was refused (tests, debugging) */
    bool nomem;
} cx;

static int refuse(cx *c, const char *why)
{
    if (!c->why)
        c->why = why;
    return -1;
}

static node *mk(cx *c, nkind k)
{
    if (c->nn == c->cn) {
        size_t n = c->cn ? 2 * c->cn : 32;
        node **q = realloc(c->nodes, n * sizeof *q);
        if (!q) {
            c->nomem = true;
            return NULL;
        }
        c->nodes = q;
        c->cn = n;
    }
    node *x = calloc(1, sizeof *x);
    if (!x) {
        c->nomem = true;
        return NULL;
    }
    x->k = k;
    c->nodes[c->nn++] = x;
    return x;
}

static void tag_reset(cx *c)
{
    for (size_t i = 0; i < c->nt; i++)
        free(c->t[i].s);
    c->nt = c->at = 0;
    for (size_t i = 0; i < c->nn; i++) {
        free(c->nodes[i]->str);
        free(c->nodes[i]->kids);
        free(c->nodes[i]);
    }
    c->nn = 0;
    c->edepth = 0;
}

static const tk *peek(const cx *c) { return c->at < c->nt ? &c->t[c->at] : NULL; }

static bool is_op(const tk *t, const char *op) { return t && t->k == TK_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n); }
static bool is_name(const tk *t, const char *nm)
{
    return t && t->k == TK_NAME && t->n == strlen(nm) && !memcmp(t->p, nm, t->n);
}

static node *parse_expr(cx *c);

static bool keyword(const tk *t)
{
    static const char *const kw[] = {"and", "or", "not", "in", "is", "if", "else"};
    for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
        if (is_name(t, kw[i]))
            return true;
    return false;
}

/* names Jinja reads as constants (cannot be assigned) */
static bool constant_name(const tk *t)
{
    static const char *const k[] = {"true", "false", "none", "True", "False", "None"};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (is_name(t, k[i]))
            return true;
    return false;
}

static node *parse_primary(cx *c)
{
    const tk *t = peek(c);
    node *x = NULL;
    if (!t) {
        refuse(c, "an expression ends early");
        return NULL;
    }
    if (t->k == TK_NAME && !keyword(t)) {
        if (!(x = mk(c, N_NAME)))
            return NULL;
        x->s = t->p;
        x->sn = t->n;
        c->at++;
    } else if (t->k == TK_INT) {
        if (!(x = mk(c, N_INT)))
            return NULL;
        x->s = t->p;
        x->sn = t->n;
        c->at++;
    } else if (t->k == TK_STR) { /* adjacent literals are one string in Jinja */
        buf_t b = {.max = RC_CHAT_MAX_TEMPLATE};
        while (peek(c) && peek(c)->k == TK_STR) {
            b_add(&b, peek(c)->s, peek(c)->sn);
            c->at++;
        }
        if (b.failed || !(x = mk(c, N_STR))) {
            free(b.p);
            c->nomem = true;
            return NULL;
        }
        x->str = b.p ? b.p : calloc(1, 1);
        x->strn = b.n;
        if (!x->str)
            c->nomem = true;
    } else if (is_op(t, "(")) {
        c->at++;
        x = parse_expr(c);
        if (!x)
            return NULL;
        if (!is_op(peek(c), ")")) {
            refuse(c, "a tuple or an unclosed parenthesis");
            return NULL;
        }
        c->at++;
    } else {
        refuse(c, "an expression form ratiocheck does not read (list, dict, operator)");
        return NULL;
    }
    return x;
}

/* Jinja 3.1's filters and tests: an unknown one is a compile error, even in
 * a branch that never runs, so a template with one is refused */
static const char *const k_filters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
    "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "items", "join",
    "last", "length", "list", "lower", "map", "max", "min", "pprint", "random", "reject", "rejectattr",
    "replace", "reverse", "round", "safe", "select", "selectattr", "slice", "sort", "string", "striptags", "sum",
    "title", "tojson", "trim", "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap",
    "xmlattr"};
static const char *const k_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "filter",
    "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping",
    "ne", "none", "number", "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper"};

static bool in_list(const char *const *list, size_t n, const char *s, size_t sn)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(list[i]) == sn && !memcmp(list[i], s, sn))
            return true;
    return false;
}

static bool dict_method(const char *s, size_t n)
{
    static const char *const m[] = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem",
                                    "setdefault", "update", "values"};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (strlen(m[i]) == n && !memcmp(m[i], s, n))
            return true;
    return false;
}

static bool ident(const char *s, size_t n)
{
    if (n == 0 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_' ||
              (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

/* unary: - / + unary (no filters), or primary with its postfixes; then filters and tests */
static node *parse_unary(cx *c, bool with_filter)
{
    if (++c->edepth > MAX_DEPTH) {
        refuse(c, "expressions nested too deeply");
        return NULL;
    }
    node *x;
    if (is_op(peek(c), "-") || is_op(peek(c), "+")) {
        bool neg = is_op(peek(c), "-");
        c->at++;
        node *a = parse_unary(c, false);
        if (!a || !(x = mk(c, neg ? N_NEG : N_POS)))
            return NULL;
        x->a = a;
    } else if (!(x = parse_primary(c))) {
        return NULL;
    }
    for (;;) { /* postfix: .name, [expr] (calls and slices are refused) */
        const tk *t = peek(c);
        if (is_op(t, ".")) {
            c->at++;
            const tk *nm = peek(c);
            if (!nm || nm->k != TK_NAME) {
                refuse(c, "an attribute that is not a name");
                return NULL;
            }
            node *y = mk(c, N_ATTR);
            if (!y)
                return NULL;
            y->a = x;
            y->s = nm->p;
            y->sn = nm->n;
            c->at++;
            x = y;
        } else if (is_op(t, "[")) {
            c->at++;
            node *i = parse_expr(c);
            if (!i)
                return NULL;
            if (!is_op(peek(c), "]")) {
                refuse(c, "a slice or an unclosed subscript");
                return NULL;
            }
            c->at++;
            node *y = mk(c, N_ITEM);
            if (!y)
                return NULL;
            y->a = x;
            y->b = i;
            x = y;
        } else if (is_op(t, "(")) {
            refuse(c, "a function call");
            return NULL;
        } else {
            break;
        }
    }
    while (with_filter) { /* | filter, is [not] test (arguments are refused) */
        const tk *t = peek(c);
        bool filter = is_op(t, "|"), test = is_name(t, "is");
        if (!filter && !test)
            break;
        c->at++;
        bool neg = false;
        if (test && is_name(peek(c), "not")) {
            neg = true;
            c->at++;
        }
        const tk *nm = peek(c);
        if (!nm || nm->k != TK_NAME) {
            refuse(c, "a filter or test that is not a name");
            return NULL;
        }
        if (filter ? !in_list(k_filters, sizeof k_filters / sizeof k_filters[0], nm->p, nm->n)
                   : !in_list(k_tests, sizeof k_tests / sizeof k_tests[0], nm->p, nm->n)) {
            refuse(c, "a filter or test Jinja does not have (a compile error)");
            return NULL;
        }
        c->at++;
        const tk *nx = peek(c);
        if (is_op(nx, "(") || (test && nx && (nx->k != TK_OP || is_op(nx, "[") || is_op(nx, "{")) &&
                                !is_name(nx, "else") && !is_name(nx, "or") && !is_name(nx, "and"))) {
            refuse(c, "a filter or test with arguments");
            return NULL;
        }
        node *y = mk(c, filter ? N_FILTER : N_TEST);
        if (!y)
            return NULL;
        y->a = x;
        y->s = nm->p;
        y->sn = nm->n;
        y->neg = neg;
        x = y;
    }
    c->edepth--;
    return x;
}

static node *bin(cx *c, node *a, node *b, const char *op, size_t opn)
{
    node *x = mk(c, N_BIN);
    if (!x)
        return NULL;
    x->a = a;
    x->b = b;
    x->s = op;
    x->sn = opn;
    return x;
}

static node *parse_pow(cx *c)
{
    node *x = parse_unary(c, true);
    while (x && is_op(peek(c), "**")) {
        c->at++;
        node *y = parse_unary(c, true);
        x = y ? bin(c, x, y, "**", 2) : NULL;
    }
    return x;
}

static node *parse_math2(cx *c)
{
    node *x = parse_pow(c);
    for (;;) {
        const tk *t = peek(c);
        if (!x || !(is_op(t, "*") || is_op(t, "/") || is_op(t, "//") || is_op(t, "%")))
            return x;
        c->at++;
        node *y = parse_pow(c);
        x = y ? bin(c, x, y, t->p, t->n) : NULL;
    }
}

static node *parse_concat(cx *c)
{
    node *x = parse_math2(c);
    while (x && is_op(peek(c), "~")) {
        c->at++;
        node *y = parse_math2(c);
        x = y ? bin(c, x, y, "~", 1) : NULL;
    }
    return x;
}

/* a + b + c (left-nested) is one N_ADD with adjacent string literals joined
 * ('a' + 'b' is the literal 'ab') */
static node *parse_math1(cx *c)
{
    node *x = parse_concat(c);
    for (;;) {
        const tk *t = peek(c);
        if (!x || !(is_op(t, "+") || is_op(t, "-")))
            return x && x->k == N_ADD && x->nk == 1 ? x->kids[0] : x;
        c->at++;
        node *y = parse_concat(c);
        if (!y)
            return NULL;
        if (t->p[0] == '-') {
            if (x->k == N_ADD && x->nk == 1)
                x = x->kids[0];
            x = bin(c, x, y, "-", 1);
            continue;
        }
        if (x->k != N_ADD) {
            node *s = mk(c, N_ADD);
            if (!s)
                return NULL;
            s->kids = malloc(2 * sizeof *s->kids);
            if (!s->kids) {
                c->nomem = true;
                return NULL;
            }
            s->kids[0] = x;
            s->nk = 1;
            x = s;
        } else {
            node **k = realloc(x->kids, (x->nk + 1) * sizeof *k);
            if (!k) {
                c->nomem = true;
                return NULL;
            }
            x->kids = k;
        }
        node *last = x->kids[x->nk - 1];
        if (last->k == N_STR && y->k == N_STR) { /* 'a' + 'b' -> 'ab' */
            char *j = malloc(last->strn + y->strn + 1);
            if (!j) {
                c->nomem = true;
                return NULL;
            }
            memcpy(j, last->str, last->strn);
            memcpy(j + last->strn, y->str, y->strn + 1);
            free(last->str);
            last->str = j;
            last->strn += y->strn;
        } else {
            x->kids[x->nk++] = y;
        }
    }
}

static node *parse_compare(cx *c)
{
    node *x = parse_math1(c);
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
    int count = 0;
    for (;;) {
        const tk *t = peek(c);
        const char *op = NULL;
        size_t opn = 0;
        for (size_t i = 0; i < sizeof ops / sizeof ops[0] && !op; i++)
            if (is_op(t, ops[i])) {
                op = ops[i];
                opn = strlen(op);
            }
        if (!op && is_name(t, "in")) {
            op = "in";
            opn = 2;
        } else if (!op && is_name(t, "not") && c->at + 1 < c->nt && is_name(&c->t[c->at + 1], "in")) {
            op = "not in";
            opn = 6;
            c->at++;
        }
        if (!x || !op)
            return x;
        if (++count > 1) {
            refuse(c, "a chained comparison");
            return NULL;
        }
        c->at++;
        node *y = parse_math1(c);
        x = y ? bin(c, x, y, op, opn) : NULL;
    }
}

static node *parse_not(cx *c)
{
    if (is_name(peek(c), "not")) {
        if (++c->edepth > MAX_DEPTH) {
            refuse(c, "expressions nested too deeply");
            return NULL;
        }
        c->at++;
        node *a = parse_not(c), *x = a ? mk(c, N_NOT) : NULL;
        if (x)
            x->a = a;
        c->edepth--;
        return x;
    }
    return parse_compare(c);
}

static node *parse_and(cx *c)
{
    node *x = parse_not(c);
    while (x && is_name(peek(c), "and")) {
        c->at++;
        node *y = parse_not(c);
        x = y ? bin(c, x, y, "and", 3) : NULL;
    }
    return x;
}

static node *parse_expr(cx *c)
{
    if (++c->edepth > MAX_DEPTH) {
        refuse(c, "expressions nested too deeply");
        return NULL;
    }
    node *x = parse_and(c);
    while (x && is_name(peek(c), "or")) {
        c->at++;
        node *y = parse_and(c);
        x = y ? bin(c, x, y, "or", 2) : NULL;
    }
    if (x && is_name(peek(c), "if")) {
        refuse(c, "a conditional expression");
        return NULL;
    }
    c->edepth--;
    return x;
}

/* the canonical text of an expression */
static void put_expr(cx *c, const node *x)
{
    buf_t *b = &c->out;
    switch (x->k) {
    case N_NAME:
    case N_INT:
        b_add(b, x->s, x->sn);
        break;
    case N_STR:
        b_chr(b, '\'');
        for (size_t i = 0; i < x->strn; i++) {
            if (x->str[i] == '\'' || x->str[i] == '\\')
                b_chr(b, '\\');
            b_chr(b, x->str[i]);
        }
        b_chr(b, '\'');
        break;
    case N_ATTR:
        put_expr(c, x->a);
        b_chr(b, '.');
        b_add(b, x->s, x->sn);
        break;
    case N_ITEM:
        put_expr(c, x->a);
        if (x->b->k == N_STR && ident(x->b->str, x->b->strn) && !dict_method(x->b->str, x->b->strn)) {
            b_chr(b, '.');
            b_add(b, x->b->str, x->b->strn);
        } else {
            b_chr(b, '[');
            put_expr(c, x->b);
            b_chr(b, ']');
        }
        break;
    case N_FILTER:
    case N_TEST:
        b_chr(b, '(');
        put_expr(c, x->a);
        b_str(b, x->k == N_FILTER ? "|" : x->neg ? " is not " : " is ");
        b_add(b, x->s, x->sn);
        b_chr(b, ')');
        break;
    case N_NOT:
    case N_NEG:
    case N_POS:
        b_str(b, x->k == N_NOT ? "(not " : x->k == N_NEG ? "(-" : "(+");
        put_expr(c, x->a);
        b_chr(b, ')');
        break;
    case N_BIN:
        b_chr(b, '(');
        put_expr(c, x->a);
        b_chr(b, ' ');
        b_add(b, x->s, x->sn);
        b_chr(b, ' ');
        put_expr(c, x->b);
        b_chr(b, ')');
        break;
    case N_ADD:
        b_chr(b, '(');
        for (size_t i = 0; i < x->nk; i++) {
            if (i)
                b_chr(b, '+');
            put_expr(c, x->kids[i]);
        }
        b_chr(b, ')');
        break;
    }
}

/* an output: literals as text, other operands as \x03=EXPR\x04 */
static void put_output(cx *c, const node *x)
{
    size_t n = x->k == N_ADD ? x->nk : 1;
    for (size_t i = 0; i < n; i++) {
        const node *e = x->k == N_ADD ? x->kids[i] : x;
        if (e->k == N_STR) {
            b_add(&c->out, e->str, e->strn);
        } else {
            b_chr(&c->out, TAG_OPEN);
            b_chr(&c->out, '=');
            put_expr(c, e);
            b_chr(&c->out, TAG_CLOSE);
        }
    }
}

/* ---- lexing ------------------------------------------------------------------ */

static bool push_tok(cx *c, tk t)
{
    if (c->nt == c->ct) {
        size_t n = c->ct ? 2 * c->ct : 32;
        tk *q = realloc(c->t, n * sizeof *q);
        if (!q) {
            free(t.s);
            c->nomem = true;
            return false;
        }
        c->t = q;
        c->ct = n;
    }
    c->t[c->nt++] = t;
    return true;
}

static bool starts(const cx *c, size_t q, const char *s)
{
    size_t n = strlen(s);
    return q + n <= c->len && memcmp(c->src + q, s, n) == 0;
}

/* the tokens of a {{ }} / {% %} tag from *pos up to its end marker; *sign
 * the end's whitespace control ('-', '+', 0); *pos after the marker */
static int lex_tag(cx *c, size_t *pos, bool block, char *sign)
{
    const char *s = c->src;
    size_t q = *pos;
    char bal[MAX_DEPTH];
    int nb = 0;
    for (;;) {
        if (q >= c->len)
            return refuse(c, "a tag is not closed");
        if (nb == 0) { /* the end is only seen with balanced brackets */
            if (block && (starts(c, q, "+%}") || starts(c, q, "-%}"))) {
                *sign = s[q];
                q += 3;
                break;
            }
            if (block && starts(c, q, "%}")) {
                *sign = 0;
                q += 2;
                break;
            }
            if (!block && starts(c, q, "-}}")) {
                *sign = '-';
                q += 3;
                break;
            }
            if (!block && starts(c, q, "}}")) {
                *sign = 0;
                q += 2;
                break;
            }
        }
        size_t w = ws_prefix(s + q, c->len - q);
        if (w) {
            q += w;
            continue;
        }
        unsigned char ch = (unsigned char)s[q];
        tk t = {0};
        t.p = s + q;
        if (ch >= '0' && ch <= '9') {
            size_t e = q;
            while (e < c->len && s[e] >= '0' && s[e] <= '9')
                e++;
            if ((ch == '0' && e - q > 1) || e - q > 18 ||
                (e < c->len && (s[e] == '.' || s[e] == '_' || (unsigned char)s[e] >= 0x80 ||
                                ((s[e] | 0x20) >= 'a' && (s[e] | 0x20) <= 'z'))))
                return refuse(c, "a number that is not a plain decimal integer");
            t.k = TK_INT;
            t.n = e - q;
            q = e;
        } else if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z' ? true : ch == '_') {
            size_t e = q;
            while (e < c->len && (((s[e] | 0x20) >= 'a' && (s[e] | 0x20) <= 'z') || s[e] == '_' ||
                                  (s[e] >= '0' && s[e] <= '9')))
                e++;
            if (e < c->len && (unsigned char)s[e] >= 0x80)
                return refuse(c, "a name with non-ASCII letters");
            t.k = TK_NAME;
            t.n = e - q;
            q = e;
        } else if (ch == '\'' || ch == '"') {
            buf_t v = {.max = RC_CHAT_MAX_TEMPLATE};
            size_t e = q + 1;
            for (;; e++) {
                if (e >= c->len) {
                    free(v.p);
                    return refuse(c, "a string that is not closed");
                }
                if ((unsigned char)s[e] == ch)
                    break;
                if (s[e] == '\\') {
                    char d = e + 1 < c->len ? s[e + 1] : 0;
                    char r = d == 'n' ? '\n' : d == 't' ? '\t' : d == '\\' || d == '\'' || d == '"' ? d : 0;
                    if (!r) {
                        free(v.p);
                        return refuse(c, "a string escape other than \\n \\t \\\\ \\' \\\"");
                    }
                    b_chr(&v, r);
                    e++;
                } else {
                    b_chr(&v, s[e]);
                }
            }
            if (v.failed) {
                free(v.p);
                c->nomem = true;
                return -2;
            }
            t.k = TK_STR;
            t.n = e + 1 - q;
            t.s = v.p ? v.p : calloc(1, 1);
            t.sn = v.n;
            if (!t.s) {
                c->nomem = true;
                return -2;
            }
            q = e + 1;
        } else {
            static const char *const two[] = {"//", "**", "==", "!=", ">=", "<="};
            t.k = TK_OP;
            t.n = 0;
            for (size_t i = 0; i < sizeof two / sizeof two[0] && !t.n; i++)
                if (starts(c, q, two[i]))
                    t.n = 2;
            if (!t.n && ch < 0x80 && strchr("+-/*%~[](){}><=.:|,;", ch) && ch)
                t.n = 1;
            if (!t.n)
                return refuse(c, "a character Jinja does not read in a tag");
            if (ch == '(' || ch == '[' || ch == '{') {
                if (nb == MAX_DEPTH)
                    return refuse(c, "brackets nested too deeply");
                bal[nb++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
            } else if (ch == ')' || ch == ']' || ch == '}') {
                if (nb == 0 || bal[nb - 1] != (char)ch)
                    return refuse(c, "unbalanced brackets");
                nb--;
            }
            q += t.n;
        }
        if (!push_tok(c, t))
            return -2;
    }
    *pos = q;
    return 0;
}

static int open_block(cx *c, int kind)
{
    if (c->depth == MAX_DEPTH)
        return refuse(c, "blocks nested too deeply");
    c->stack[c->depth++] = kind;
    return 0;
}

/* a {% %} tag's tokens: the statement, in canonical form */
static int statement(cx *c)
{
    const tk *t = peek(c);
    buf_t *b = &c->out;
    if (!t || t->k != TK_NAME)
        return refuse(c, "an empty block tag");
    c->at++;
    node *x = NULL;
    int top = c->depth ? c->stack[c->depth - 1] : 0;
    if (is_name(t, "for")) {
        const tk *v = peek(c);
        if (!v || v->k != TK_NAME || keyword(v) || constant_name(v) || is_name(v, "loop"))
            return refuse(c, "a for loop over something other than one name");
        c->at++;
        if (!is_name(peek(c), "in"))
            return refuse(c, "a for loop over something other than one name");
        c->at++;
        if (!(x = parse_expr(c)))
            return -1;
        if (peek(c))
            return refuse(c, "a for loop with a filter, else or recursive");
        b_chr(b, TAG_OPEN);
        b_str(b, "for ");
        b_add(b, v->p, v->n);
        b_str(b, " in ");
        put_expr(c, x);
        b_chr(b, TAG_CLOSE);
        return open_block(c, 3);
    }
    if (is_name(t, "if") || is_name(t, "elif")) {
        bool elif = t->p[0] == 'e';
        if (elif && top != 1)
            return refuse(c, "an elif outside an if");
        if (!(x = parse_expr(c)))
            return -1;
        if (peek(c))
            return refuse(c, "a tuple in a condition");
        b_chr(b, TAG_OPEN);
        b_str(b, elif ? "elif " : "if ");
        put_expr(c, x);
        b_chr(b, TAG_CLOSE);
        return elif ? 0 : open_block(c, 1);
    }
    if (is_name(t, "else") || is_name(t, "endif") || is_name(t, "endfor")) {
        if (peek(c))
            return refuse(c, "words after else / endif / endfor");
        if (is_name(t, "else")) {
            if (top != 1)
                return refuse(c, "an else outside an if (or after else, or a for-else)");
            c->stack[c->depth - 1] = 2;
        } else if (is_name(t, "endif") ? top != 1 && top != 2 : top != 3) {
            return refuse(c, "an end tag that closes nothing open");
        } else {
            c->depth--;
        }
        b_chr(b, TAG_OPEN);
        b_add(b, t->p, t->n);
        b_chr(b, TAG_CLOSE);
        return 0;
    }
    if (is_name(t, "set")) {
        const tk *v = peek(c);
        if (!v || v->k != TK_NAME || keyword(v) || constant_name(v) || c->at + 1 >= c->nt ||
            !is_op(&c->t[c->at + 1], "="))
            return refuse(c, "a set other than NAME = expression");
        c->at += 2;
        if (!(x = parse_expr(c)))
            return -1;
        if (peek(c))
            return refuse(c, "a set of a tuple");
        b_chr(b, TAG_OPEN);
        b_str(b, "set ");
        b_add(b, v->p, v->n);
        b_chr(b, '=');
        put_expr(c, x);
        b_chr(b, TAG_CLOSE);
        return 0;
    }
    return refuse(c, "a statement other than for, if, elif, else, set (e.g. macro, raw, generation)");
}

/* The canonical form of a template into c->out; 0, -1 refused (c->why), -2
 * out of memory. */
static int canonical(cx *c)
{
    const char *s = c->src;
    size_t len = c->len;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f)
            return refuse(c, "a control character (carriage return, NUL, ...)");
    }
    if (len && s[len - 1] == '\n') /* keep_trailing_newline=False drops one */
        len--;
    c->len = len;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < len) {
        size_t open = pos;
        while (open + 1 < len && !(s[open] == '{' && (s[open + 1] == '{' || s[open + 1] == '%' || s[open + 1] == '#')))
            open++;
        if (open + 1 >= len) { /* the rest is text */
            b_add(&c->out, s + pos, len - pos);
            break;
        }
        char kind = s[open + 1];
        char sign = open + 2 < len && (s[open + 2] == '-' || s[open + 2] == '+') ? s[open + 2] : 0;
        size_t dl = open - pos;
        if (sign == '-') { /* strip the whitespace before the tag */
            dl -= ws_suffix(s + pos, dl);
        } else if (sign != '+' && kind != '{') { /* lstrip_blocks */
            size_t l = dl;
            while (l > 0 && s[pos + l - 1] != '\n')
                l--;
            if ((l > 0 || line_starting) && l < dl && ws_prefix(s + pos + l, dl - l) == dl - l)
                dl = l;
        }
        b_add(&c->out, s + pos, dl);
        size_t q = open + 2 + (sign ? 1 : 0), end_start, after;
        char esign = 0;
        if (kind == '#') {
            size_t e = q;
            while (e + 1 < len && !(s[e] == '#' && s[e + 1] == '}'))
                e++;
            if (e + 1 >= len)
                return refuse(c, "a comment that is not closed");
            esign = e > q && (s[e - 1] == '-' || s[e - 1] == '+') ? s[e - 1] : 0;
            end_start = e + 2;
            after = end_start;
        } else {
            tag_reset(c);
            int r = lex_tag(c, &q, kind == '%', &esign);
            if (r)
                return r;
            end_start = after = q;
            if (kind == '%') {
                if (is_name(peek(c), "raw"))
                    return refuse(c, "a raw block");
                r = statement(c);
            } else {
                node *x = parse_expr(c);
                r = !x ? -1 : peek(c) ? refuse(c, "a tuple in an output") : 0;
                if (!r)
                    put_output(c, x);
            }
            if (c->nomem)
                return -2;
            if (r)
                return r;
        }
        if (esign == '-')
            after += ws_prefix(s + after, len - after);
        else if (!esign && kind != '{' && after < len && s[after] == '\n') /* trim_blocks */
            after++;
        /* Jinja's line_starting: the end marker's match ends with a newline */
        line_starting = after > end_start ? s[after - 1] == '\n' : false;
        pos = after;
    }
    if (c->depth)
        return refuse(c, "a block that is not closed");
    if (c->out.failed)
        return -2;
    if (c->pattern) { /* @SYS@ -> \x01, @SKIP@ -> \x02 */
        size_t w = 0;
        for (size_t r = 0; r < c->out.n;) {
            if (c->out.n - r >= 5 && !memcmp(c->out.p + r, "@SYS@", 5)) {
                c->out.p[w++] = MARK_SYS;
                r += 5;
            } else if (c->out.n - r >= 6 && !memcmp(c->out.p + r, "@SKIP@", 6)) {
                c->out.p[w++] = MARK_SKIP;
                r += 6;
            } else {
                c->out.p[w++] = c->out.p[r++];
            }
        }
        c->out.n = w;
        c->out.p[w] = '\0';
    }
    return 0;
}

static int canonicalize(const char *src, size_t len, bool pattern, buf_t *out, const char **why)
{
    cx c = {.src = src, .len = len, .pattern = pattern, .out = {.max = 8 * RC_CHAT_MAX_TEMPLATE + 4096}};
    int r = canonical(&c);
    tag_reset(&c);
    free(c.t);
    free(c.nodes);
    if (r) {
        free(c.out.p);
        c.out = (buf_t){0};
    }
    *out = c.out;
    if (why)
        *why = c.why;
    return r;
}

/* ---- the layouts ---------------------------------------------------------- */

typedef struct {
    rc_chat_kind kind;
    const char *form;
    const char *jinja;
} layout;

#define CHATML_TURN "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
#define CHATML_GEN "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
#define LLAMA3_GEN "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"

static const layout k_layouts[] = {
    {RC_CHAT_CHATML, "ChatML (SmolLM2/Qwen2 form)",
     "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
     "{{ '<|im_start|>system\\n@SYS@<|im_end|>\\n' }}{% endif %}" CHATML_TURN "{% endfor %}" CHATML_GEN},
    {RC_CHAT_CHATML, "ChatML (SmolLM2/Qwen2 form)",
     "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
     "{{ '<|im_start|>system\\n@SYS@<|im_end|>\\n' }}{% endif %}" CHATML_TURN "{% endfor %}" CHATML_GEN},
    {RC_CHAT_CHATML, "ChatML (Qwen2.5 form)",
     "{% if tools %}@SKIP@{% else %}{% if messages[0]['role'] == 'system' %}"
     "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{% else %}"
     "{{ '<|im_start|>system\\n@SYS@<|im_end|>\\n' }}{% endif %}{% endif %}{% for message in messages %}"
     "{% if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
     "(message.role == 'assistant' and not message.tool_calls) %}" CHATML_TURN
     "{% elif message.role == 'assistant' %}@SKIP@{% elif message.role == 'tool' %}@SKIP@{% endif %}"
     "{% endfor %}" CHATML_GEN},
    {RC_CHAT_CHATML, "ChatML", "{% for message in messages %}" CHATML_TURN "{% endfor %}" CHATML_GEN},
    {RC_CHAT_LLAMA3, "Llama-3 (Meta-Llama-3-Instruct form)",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
     "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
     "{{ content }}{% endfor %}" LLAMA3_GEN},
    {RC_CHAT_LLAMA3, "Llama-3 (bos_token first)",
     "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
     "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}" LLAMA3_GEN},
};

/* the next tag at or after i (or n) */
static size_t next_tag(const char *s, size_t n, size_t i)
{
    while (i < n && s[i] != TAG_OPEN)
        i++;
    return i;
}

static bool tag_is(const char *s, size_t n, size_t i, const char *word)
{
    size_t l = strlen(word);
    return i + 1 + l <= n && !memcmp(s + i + 1, word, l);
}

/* from i, past a balanced run of tags up to the first if-level
 * elif / else / endif (i at a tag); n when there is none */
static size_t skip_branch(const char *s, size_t n, size_t i)
{
    int depth = 0;
    for (i = next_tag(s, n, i); i < n; i = next_tag(s, n, i + 1)) {
        if (tag_is(s, n, i, "if ") || tag_is(s, n, i, "for "))
            depth++;
        else if (tag_is(s, n, i, "endif") || tag_is(s, n, i, "endfor") || tag_is(s, n, i, "elif ") ||
                 tag_is(s, n, i, "else\x04")) {
            if (depth == 0)
                return i;
            if (tag_is(s, n, i, "endif") || tag_is(s, n, i, "endfor"))
                depth--;
        }
    }
    return n;
}

/* the model's form m against a layout's p; *sys / *sys_len the @SYS@ text */
static bool match(const buf_t *p, const buf_t *m, const char **sys, size_t *sys_len)
{
    size_t i = 0, j = 0;
    *sys = NULL;
    *sys_len = 0;
    while (i < p->n) {
        char pc = p->p[i];
        if (pc == MARK_SYS) { /* the model's text up to its next tag ends with the layout's rest */
            size_t pe = next_tag(p->p, p->n, i + 1), me = next_tag(m->p, m->n, j);
            size_t suf = pe - (i + 1);
            if (me - j < suf || memcmp(m->p + me - suf, p->p + i + 1, suf) != 0)
                return false;
            *sys = m->p + j;
            *sys_len = me - suf - j;
            j = me - suf;
            i++;
        } else if (pc == MARK_SKIP) { /* text before the branch's first tag counts as part of it */
            j = skip_branch(m->p, m->n, j);
            i++;
        } else {
            if (j >= m->n || m->p[j] != pc)
                return false;
            i++;
            j++;
        }
    }
    return j == m->n;
}

static rc_status refuse_template(const char *what, const char *tmpl, size_t len)
{
    static const char hint[] = "Cutting Knowledge Date";
    bool dated = false;
    for (size_t i = 0; i + sizeof hint - 1 <= len && !dated; i++)
        dated = !memcmp(tmpl + i, hint, sizeof hint - 1);
    if (dated)
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "the model's chat template (%s) is a Llama-3.1-style one (a dated system message, \"%s\"), "
                         "which ratiocheck does not render (supported: " RC_CHAT_SUPPORTED
                         "); give {\"tokens\": [...]} or {\"prompt\": \"...\"} instead",
                         what, hint);
    return rc_errorf(RC_ERR_UNSUPPORTED,
                     "the model's chat template (%s) is not one ratiocheck renders (supported: " RC_CHAT_SUPPORTED
                     "); give {\"tokens\": [...]} or {\"prompt\": \"...\"} instead",
                     what);
}

void rc_chat_free(rc_chat *c)
{
    if (!c)
        return;
    free(c->system);
    free(c->bos);
    free(c);
}

rc_status rc_chat_parse(const char *tmpl, size_t len, const char *what, const char *bos, rc_chat **out)
{
    *out = NULL;
    size_t bad;
    if (len > RC_CHAT_MAX_TEMPLATE)
        return rc_errorf(RC_ERR_UNSUPPORTED, "the model's chat template (%s) is %zu bytes, more than the %zu ratiocheck reads",
                         what, len, RC_CHAT_MAX_TEMPLATE);
    if (!rc_utf8_valid((const unsigned char *)tmpl, len, &bad))
        return rc_errorf(RC_ERR_FORMAT, "the model's chat template (%s) is not UTF-8 (byte %zu)", what, bad);
    buf_t m;
    int r = canonicalize(tmpl, len, false, &m, NULL);
    if (r == -2)
        return rc_errorf(RC_ERR_NOMEM, "%s: out of memory reading the chat template", what);
    if (r)
        return refuse_template(what, tmpl, len);
    rc_status st = RC_OK;
    const layout *found = NULL;
    const char *sys = NULL;
    size_t sys_len = 0;
    bool has_sys = false;
    for (size_t k = 0; k < sizeof k_layouts / sizeof k_layouts[0] && !found && st == RC_OK; k++) {
        buf_t p;
        const char *why = NULL;
        r = canonicalize(k_layouts[k].jinja, strlen(k_layouts[k].jinja), true, &p, &why);
        if (r == -2)
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
        else if (r)
            st = rc_errorf(RC_ERR_INTERNAL, "chat layout %zu does not read: %s", k, why ? why : "?");
        else if (match(&p, &m, &sys, &sys_len)) {
            found = &k_layouts[k];
            has_sys = memchr(p.p, MARK_SYS, p.n) != NULL;
        }
        free(p.p);
    }
    rc_chat *c = NULL;
    if (st == RC_OK && !found)
        st = refuse_template(what, tmpl, len);
    if (st == RC_OK && found->kind == RC_CHAT_LLAMA3 && !bos)
        st = rc_errorf(RC_ERR_UNSUPPORTED,
                       "the model's chat template (%s) writes bos_token, which tokenizer_config.json does not set; "
                       "give {\"tokens\": [...]} or {\"prompt\": \"...\"} instead",
                       what);
    if (st == RC_OK && !(c = calloc(1, sizeof *c)))
        st = rc_errorf(RC_ERR_NOMEM, "out of memory");
    if (st == RC_OK) {
        c->kind = found->kind;
        c->form = found->form;
        if (has_sys) {
            c->system = malloc(sys_len + 1);
            if (c->system) {
                memcpy(c->system, sys, sys_len);
                c->system[sys_len] = '\0';
                c->system_len = sys_len;
            }
        }
        if (c->kind == RC_CHAT_LLAMA3) {
            c->bos = strdup(bos);
            c->bos_len = c->bos ? strlen(c->bos) : 0;
        }
        if ((has_sys && !c->system) || (c->kind == RC_CHAT_LLAMA3 && !c->bos))
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    free(m.p);
    if (st != RC_OK) {
        rc_chat_free(c);
        return st;
    }
    *out = c;
    return RC_OK;
}

rc_status rc_chat_load(const rc_tokenizer *tok, rc_chat **out)
{
    *out = NULL;
    const rc_tokenizer_chat *ci = rc_tokenizer_chat_info(tok);
    if (ci->status != RC_OK)
        return rc_errorf(ci->status, "%s", ci->error);
    if (!ci->template_text) {
        const char *cp = ci->config_path ? ci->config_path : "tokenizer_config.json";
        const char *sl = strrchr(cp, '/');
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "{\"messages\": [...]} needs the model's chat template, and %.*s has none (\"chat_template\" in "
                         "tokenizer_config.json, or chat_template.jinja); give {\"tokens\": [...]} or {\"prompt\": "
                         "\"...\"} instead",
                         sl ? (int)(sl - cp) : 1, sl ? cp : ".");
    }
    RC_TRY(rc_chat_parse(ci->template_text, ci->template_len, ci->template_path, ci->bos_token, out));
    rc_chat *c = *out;
    if (c->kind == RC_CHAT_LLAMA3) {
        bool special;
        rc_status st = RC_OK;
        if (ci->bos_uncertain)
            st = rc_errorf(RC_ERR_UNSUPPORTED,
                           "the model's chat template (%s) writes bos_token, and special_tokens_map.json names another "
                           "one than %s (or cannot be read); give {\"tokens\": [...]} or {\"prompt\": \"...\"} instead",
                           ci->template_path, ci->config_path);
        else if (rc_tokenizer_added_id(tok, c->bos, c->bos_len, &special) < 0 || !special)
            st = rc_errorf(RC_ERR_UNSUPPORTED,
                           "the model's chat template (%s) writes bos_token \"%s\", which is not a special token of "
                           "tokenizer.json; give {\"tokens\": [...]} or {\"prompt\": \"...\"} instead",
                           ci->template_path, c->bos);
        if (st != RC_OK) {
            rc_chat_free(c);
            *out = NULL;
            return st;
        }
    }
    return RC_OK;
}

rc_chat_kind rc_chat_kind_of(const rc_chat *c) { return c->kind; }
const char *rc_chat_default_system(const rc_chat *c) { return c->system; }
const char *rc_chat_describe(const rc_chat *c) { return c->form; }

/* ---- messages and rendering ------------------------------------------------- */

static const char *const k_roles[] = {"system", "user", "assistant"};

rc_status rc_chat_check_messages(const json_t *messages)
{
    if (!json_is_array(messages))
        return rc_errorf(RC_ERR_FORMAT, "\"messages\" is not an array");
    size_t n = json_array_size(messages);
    if (n == 0)
        return rc_errorf(RC_ERR_FORMAT, "\"messages\" is empty");
    if (n > RC_CHAT_MAX_MESSAGES)
        return rc_errorf(RC_ERR_FORMAT, "\"messages\" has %zu messages, more than %zu", n, RC_CHAT_MAX_MESSAGES);
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(messages, i);
        if (!json_is_object(m))
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu] is not an object", i);
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)m, key, v)
        {
            if (strcmp(key, "role") != 0 && strcmp(key, "content") != 0)
                return rc_errorf(RC_ERR_FORMAT, "messages[%zu] has \"%.40s\": a message has only \"role\" and \"content\"",
                                 i, key);
        }
        const json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!role)
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu] has no \"role\"", i);
        if (!json_is_string(role))
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu].role is not a string", i);
        bool known = false;
        for (size_t r = 0; r < 3 && !known; r++)
            known = json_string_length(role) == strlen(k_roles[r]) && !strcmp(json_string_value(role), k_roles[r]);
        if (!known) {
            const char *rv = json_string_value(role);
            size_t rl = json_string_length(role), k = 0;
            while (k < rl && k < 40 && (unsigned char)rv[k] >= 0x20 && rv[k] != '"' && rv[k] != '\\' &&
                   (unsigned char)rv[k] < 0x80)
                k++;
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu].role \"%.*s%s\" is not system, user or assistant", i, (int)k,
                             rv, k < rl ? "..." : "");
        }
        if (!content)
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu] has no \"content\"", i);
        if (!json_is_string(content))
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu].content is not a string", i);
        if (memchr(json_string_value(content), '\0', json_string_length(content)))
            return rc_errorf(RC_ERR_FORMAT, "messages[%zu].content contains a NUL character", i);
    }
    return RC_OK;
}

/* Python's str.strip(): [*b, *b + *n) */
static void py_strip(const char *s, size_t len, size_t *b, size_t *n)
{
    size_t lead = ws_prefix(s, len);
    size_t trail = lead == len ? 0 : ws_suffix(s + lead, len - lead);
    *b = lead;
    *n = len - lead - trail;
}

rc_status rc_chat_render(const rc_chat *c, const json_t *messages, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    RC_TRY(rc_chat_check_messages(messages));
    const size_t n = json_array_size(messages);
    buf_t b = {.max = (size_t)1 << 40};
    const char *first = json_string_value(json_object_get(json_array_get(messages, 0), "role"));
    if (c->kind == RC_CHAT_CHATML) {
        if (c->system && strcmp(first, "system") != 0) {
            b_str(&b, "<|im_start|>system\n");
            b_add(&b, c->system, c->system_len);
            b_str(&b, "<|im_end|>\n");
        }
        for (size_t i = 0; i < n; i++) {
            const json_t *m = json_array_get(messages, i), *ct = json_object_get(m, "content");
            b_str(&b, "<|im_start|>");
            b_str(&b, json_string_value(json_object_get(m, "role")));
            b_chr(&b, '\n');
            b_add(&b, json_string_value(ct), json_string_length(ct));
            b_str(&b, "<|im_end|>\n");
        }
        b_str(&b, "<|im_start|>assistant\n");
    } else {
        b_add(&b, c->bos, c->bos_len);
        for (size_t i = 0; i < n; i++) {
            const json_t *m = json_array_get(messages, i), *ct = json_object_get(m, "content");
            size_t at, cn;
            py_strip(json_string_value(ct), json_string_length(ct), &at, &cn);
            b_str(&b, "<|start_header_id|>");
            b_str(&b, json_string_value(json_object_get(m, "role")));
            b_str(&b, "<|end_header_id|>\n\n");
            b_add(&b, json_string_value(ct) + at, cn);
            b_str(&b, "<|eot_id|>");
        }
        b_str(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    }
    if (b.failed) {
        free(b.p);
        return rc_errorf(RC_ERR_NOMEM, "out of memory rendering the chat template");
    }
    *text = b.p;
    *len = b.n;
    return RC_OK;
}

rc_status rc_chat_encode(const rc_chat *c, const rc_tokenizer *tok, const json_t *messages, char **text,
                         int32_t **ids, int64_t *n)
{
    size_t len;
    *ids = NULL;
    *n = 0;
    RC_TRY(rc_chat_render(c, messages, text, &len));
    rc_status s = rc_tokenizer_encode(tok, *text, len, false, ids, n);
    if (s != RC_OK) {
        free(*text);
        *text = NULL;
    }
    return s;
}

rc_status rc_chat_encode_json(const rc_tokenizer *tok, const char *messages_json, size_t len, char **text,
                              int32_t **ids, int64_t *n)
{
    *text = NULL;
    *ids = NULL;
    *n = 0;
    json_error_t err;
    json_t *m = json_loadb(messages_json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    if (!m)
        return rc_errorf(RC_ERR_FORMAT, "messages: %s at line %d", err.text, err.line);
    rc_chat *c = NULL;
    rc_status s = rc_chat_check_messages(m);
    if (s == RC_OK)
        s = rc_chat_load(tok, &c);
    if (s == RC_OK)
        s = rc_chat_encode(c, tok, m, text, ids, n);
    rc_chat_free(c);
    json_decref(m);
    return s;
}
