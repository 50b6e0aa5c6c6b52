/* A Jinja subset interpreter for chat templates (jinja.h).
 *
 * Lexing follows jinja2 3.1's lexer as transformers configures it:
 * trim_blocks (one newline after a block or comment tag is dropped),
 * lstrip_blocks (spaces and tabs from the start of a line to a block or
 * comment tag are dropped, unless the tag opens with "+"), "-" on either side
 * of a tag strips all whitespace on that side, one trailing newline of the
 * template is dropped (keep_trailing_newline off). Whitespace is Python's
 * (str.isspace, the re module's \s).
 *
 * The parser builds a tree in an arena owned by the template; rendering
 * evaluates it with values in an arena of its own (bounded by
 * RC_JINJA_MAX_MEMORY), counting steps (RC_JINJA_MAX_STEPS). Values follow
 * Python's semantics where templates can see them: str is UTF-8 with lengths,
 * indices and slices in code points; int is 64-bit (overflow is an error);
 * float is double with Python's repr; lists and dicts print as Python's repr;
 * undefined values print as "" and fail in arithmetic and attribute access,
 * as jinja2's default Undefined does. */
#include "jinja.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "json_util.h"

/* ======================================================================== */
/* arena                                                                    */
/* ======================================================================== */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[];
} chunk;

typedef struct {
    chunk *head;
    size_t total, max;
    bool over, capped; /* capped: over the limit (not out of memory) */
} arena;

static void *ar_alloc(arena *a, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0)
        n = sizeof(max_align_t);
    if (a->over || n > a->max || a->total > a->max - n) {
        a->capped = a->capped || !a->over;
        a->over = true;
        return NULL;
    }
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > ((size_t)64 << 10) ? n : ((size_t)64 << 10);
        chunk *c = malloc(sizeof *c + cap);
        if (!c) {
            a->over = true;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = (char *)a->head->data + a->head->used;
    a->head->used += n;
    a->total += n;
    return p;
}

static void ar_free(arena *a)
{
    chunk *c = a->head;
    while (c) {
        chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
}

/* ======================================================================== */
/* Python's whitespace and UTF-8                                            */
/* ======================================================================== */

static bool py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

/* the code point at s[0..n) (valid UTF-8, n > 0); *len its bytes */
static uint32_t u8_cp(const char *str, size_t n, size_t *len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t l = s[0] < 0x80 ? 1 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : 4;
    if (l > n)
        l = n;
    uint32_t cp = l == 1 ? s[0] : (uint32_t)(s[0] & (0x3f >> (l - 1)));
    for (size_t i = 1; i < l; i++)
        cp = (cp << 6) | (s[i] & 0x3f);
    *len = l;
    return cp;
}

/* start of the code point that ends at s[e] (exclusive) */
static size_t u8_prev(const char *s, size_t e)
{
    size_t b = e - 1;
    while (b > 0 && ((unsigned char)s[b] & 0xc0) == 0x80)
        b--;
    return b;
}

static size_t u8_put(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static size_t u8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

/* ======================================================================== */
/* tokens                                                                   */
/* ======================================================================== */

typedef enum { T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF } tkind;

typedef struct {
    tkind k;
    int line;
    const char *p; /* DATA / STR: the (decoded) text in the arena; NAME / OP / INT / FLOAT: the source */
    size_t n;
    int64_t i;
    double f;
} tok;

/* ======================================================================== */
/* tree                                                                     */
/* ======================================================================== */

typedef enum {
    /* statements */
    S_BODY,
    S_TEXT,
    S_OUT,
    S_IF,
    S_FOR,
    S_SET,
    S_SETBLOCK,
    S_BREAK,
    S_CONTINUE,
    S_GENERATION,
    /* expressions */
    E_LIT,
    E_NAME,
    E_LIST,
    E_TUPLE,
    E_DICT,
    E_ATTR,
    E_ITEM,
    E_SLICE,
    E_CALL,
    E_KWARG,
    E_FILTER,
    E_TEST,
    E_NOT,
    E_NEG,
    E_POS,
    E_AND,
    E_OR,
    E_BIN,
    E_CONCAT,
    E_COMPARE,
    E_COND,
    E_NONE_ARG /* an absent slice bound */
} nkind;

enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW };
enum { CMP_EQ = 1, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

struct jv;
typedef struct node {
    uint8_t k;
    uint8_t op;
    bool neg; /* E_TEST: is not */
    int line;
    const char *s; /* NAME / ATTR / FILTER / TEST / KWARG name; TEXT / string literal */
    size_t sn;
    int id; /* FILTER / TEST / CALL: which one */
    struct node *a, *b, *c;
    struct node **kids; /* BODY statements; IF: cond, body, cond, body, ...; LIST / TUPLE / DICT (k, v, ...) items;
                           CALL / FILTER / TEST arguments; COMPARE: operands (op codes in ops) */
    size_t nk;
    uint8_t *ops;
    /* E_LIT */
    uint8_t lt; /* literal type: 1 str, 2 int, 3 float, 4 bool, 5 none */
    int64_t li;
    double lf;
} node;

struct rc_jinja {
    arena ar;
    node *root;
    const char *what;
    char *what_copy;
    bool fixed_time;
    struct tm tm;
    /* names read */
    const char **names;
    size_t *name_lens;
    size_t nnames, cnames;
};

/* ======================================================================== */
/* lexer                                                                    */
/* ======================================================================== */

typedef struct {
    const char *src;
    size_t len;
    const char *what;
    arena *ar;
    tok *t;
    size_t nt, ct;
    char err[400];
    rc_status st;
    int line, eline;
} lexer;

static bool lx_fail(lexer *L, rc_status st, int line, const char *fmt, ...)
{
    if (L->st != RC_OK)
        return false;
    char m[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    L->st = st;
    L->eline = line;
    snprintf(L->err, sizeof L->err, "%s", m);
    return false;
}

static bool lx_push(lexer *L, tkind k, const char *p, size_t n)
{
    if (L->nt == L->ct) {
        size_t c = L->ct ? 2 * L->ct : 256;
        tok *q = realloc(L->t, c * sizeof *q);
        if (!q)
            return lx_fail(L, RC_ERR_NOMEM, L->line, "out of memory");
        L->t = q;
        L->ct = c;
    }
    tok *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->p = p;
    t->n = n;
    t->line = L->line;
    return true;
}

static int count_nl(const char *s, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += s[i] == '\n';
    return c;
}

/* bytes of Python whitespace at the start of s[0..n) */
static size_t ws_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t l;
        if (!py_space(u8_cp(s + i, n - i, &l)))
            break;
        i += l;
    }
    return i;
}

/* bytes of Python whitespace at the end of s[0..n) */
static size_t ws_suffix(const char *s, size_t n)
{
    size_t e = n;
    while (e > 0) {
        size_t b = u8_prev(s, e), l;
        if (!py_space(u8_cp(s + b, e - b, &l)))
            break;
        e = b;
    }
    return n - e;
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* a string literal at s[0] (a quote) within s[0..n): decoded as Python's
 * unicode-escape does; *used the source bytes */
static bool lx_string(lexer *L, const char *s, size_t n, size_t *used)
{
    char q = s[0];
    size_t e = 1;
    while (e < n && s[e] != q) {
        if (s[e] == '\\' && e + 1 < n)
            e++;
        e++;
    }
    if (e >= n)
        return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "an unterminated string");
    char *o = ar_alloc(L->ar, e + 1);
    if (!o)
        return lx_fail(L, RC_ERR_NOMEM, L->line, "out of memory");
    size_t w = 0;
    for (size_t i = 1; i < e; i++) {
        if (s[i] != '\\') {
            o[w++] = s[i];
            continue;
        }
        char c = s[++i];
        switch (c) {
        case '\n': break;
        case '\\': o[w++] = '\\'; break;
        case '\'': o[w++] = '\''; break;
        case '"': o[w++] = '"'; break;
        case 'a': o[w++] = '\a'; break;
        case 'b': o[w++] = '\b'; break;
        case 'f': o[w++] = '\f'; break;
        case 'n': o[w++] = '\n'; break;
        case 'r': o[w++] = '\r'; break;
        case 't': o[w++] = '\t'; break;
        case 'v': o[w++] = '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
            int nd = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int d = 0; d < nd; d++) {
                int h = i + 1 + (size_t)d < e ? hexv(s[i + 1 + (size_t)d]) : -1;
                if (h < 0)
                    return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "a malformed \\%c escape in a string", c);
                cp = cp * 16 + (uint32_t)h;
            }
            i += (size_t)nd;
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp == 0)
                return lx_fail(L, RC_ERR_UNSUPPORTED, L->line,
                               "a string escape for U+%04X (NUL, a surrogate or out of range)", (unsigned)cp);
            w += u8_put(o + w, cp); /* at most the escape's own length */
            break;
        }
        case 'N': return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "unsupported Jinja construct '\\N{...}' escape");
        default:
            if (c >= '0' && c <= '7') {
                uint32_t cp = (uint32_t)(c - '0');
                for (int d = 0; d < 2 && i + 1 < e && s[i + 1] >= '0' && s[i + 1] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(s[++i] - '0');
                if (cp == 0)
                    return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "a string escape for NUL");
                w += u8_put(o + w, cp);
            } else { /* Python keeps an unknown escape as it is */
                o[w++] = '\\';
                o[w++] = c;
            }
        }
    }
    o[w] = '\0';
    if (!lx_push(L, T_STR, o, w))
        return false;
    L->line += count_nl(s, e + 1);
    *used = e + 1;
    return true;
}

static bool is_id0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_id(char c) { return is_id0(c) || (c >= '0' && c <= '9'); }
static bool is_dig(char c) { return c >= '0' && c <= '9'; }

/* the tokens of a tag from s[i]; returns the index after the tag's end */
static bool lx_tag(lexer *L, bool block, size_t *pos, bool *ends_nl)
{
    const char *s = L->src;
    size_t n = L->len, i = *pos;
    int depth = 0;
    for (;;) {
        if (i >= n)
            return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "a tag opened and never closed");
        /* the end of the tag, when no bracket is open */
        if (depth == 0) {
            char c1 = block ? '%' : '}';
            size_t at = i;
            bool minus = false, plus = false;
            if (at + 2 < n && s[at] == '-' && s[at + 1] == c1 && s[at + 2] == '}') {
                minus = true;
                at++;
            } else if (block && at + 2 < n && s[at] == '+' && s[at + 1] == '%' && s[at + 2] == '}') {
                plus = true;
                at++;
            }
            if (at + 1 < n && s[at] == c1 && s[at + 1] == '}') {
                if (!lx_push(L, block ? T_BLOCK_END : T_VAR_END, s + i, 0))
                    return false;
                at += 2;
                size_t e = at;
                if (minus)
                    e += ws_prefix(s + at, n - at);
                else if (block && !plus && at < n && s[at] == '\n')
                    e++;
                L->line += count_nl(s + at, e - at);
                *ends_nl = e > i && s[e - 1] == '\n';
                *pos = e;
                return true;
            }
        }
        size_t l;
        uint32_t cp = u8_cp(s + i, n - i, &l);
        if (py_space(cp)) {
            L->line += s[i] == '\n';
            i += l;
            continue;
        }
        char c = s[i];
        if (c == '\'' || c == '"') {
            size_t used = 0;
            if (!lx_string(L, s + i, n - i, &used))
                return false;
            i += used;
        } else if (is_id0(c)) {
            size_t b = i;
            while (i < n && is_id(s[i]))
                i++;
            if (!lx_push(L, T_NAME, s + b, i - b))
                return false;
        } else if (is_dig(c)) {
            size_t b = i;
            bool fl = false;
            if (c == '0' && i + 1 < n && (s[i + 1] == 'x' || s[i + 1] == 'X' || s[i + 1] == 'o' || s[i + 1] == 'O' ||
                                          s[i + 1] == 'b' || s[i + 1] == 'B'))
                return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "unsupported Jinja construct 'hexadecimal, octal or binary integer'");
            while (i < n && (is_dig(s[i]) || (s[i] == '_' && i + 1 < n && is_dig(s[i + 1]))))
                i++;
            if (i + 1 < n && s[i] == '.' && is_dig(s[i + 1])) {
                fl = true;
                i++;
                while (i < n && (is_dig(s[i]) || (s[i] == '_' && i + 1 < n && is_dig(s[i + 1]))))
                    i++;
            }
            if (i < n && (s[i] == 'e' || s[i] == 'E')) {
                size_t j = i + 1;
                if (j < n && (s[j] == '+' || s[j] == '-'))
                    j++;
                if (j < n && is_dig(s[j])) {
                    fl = true;
                    i = j;
                    while (i < n && is_dig(s[i]))
                        i++;
                }
            }
            char num[64];
            size_t w = 0;
            for (size_t k = b; k < i; k++)
                if (s[k] != '_') {
                    if (w + 1 >= sizeof num)
                        return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "a number literal too long");
                    num[w++] = s[k];
                }
            num[w] = '\0';
            if (!lx_push(L, fl ? T_FLOAT : T_INT, s + b, i - b))
                return false;
            tok *t = &L->t[L->nt - 1];
            if (fl) {
                t->f = strtod(num, NULL);
            } else {
                uint64_t v = 0;
                for (size_t k = 0; k < w; k++) {
                    if (v > (uint64_t)(INT64_MAX - (num[k] - '0')) / 10)
                        return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "an integer literal beyond 64 bits");
                    v = v * 10 + (uint64_t)(num[k] - '0');
                }
                t->i = (int64_t)v;
            }
        } else {
            static const char *const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                              "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
            size_t m = 0;
            for (size_t k = 0; k < sizeof ops / sizeof ops[0] && !m; k++) {
                size_t ol = strlen(ops[k]);
                if (i + ol <= n && !memcmp(s + i, ops[k], ol))
                    m = ol;
            }
            if (!m) {
                if ((unsigned char)c >= 0x80)
                    return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "a non-ASCII character outside a string in a tag");
                return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "an unexpected character '%c' in a tag", c);
            }
            if (c == '(' || c == '[' || c == '{')
                depth++;
            else if (c == ')' || c == ']' || c == '}') {
                if (depth == 0)
                    return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "an unbalanced '%c'", c);
                depth--;
            }
            if (depth > RC_JINJA_MAX_DEPTH)
                return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "brackets nested more than %d deep", RC_JINJA_MAX_DEPTH);
            if (!lx_push(L, T_OP, s + i, m))
                return false;
            i += m;
        }
    }
}

static bool lx_run(lexer *L)
{
    const char *s = L->src;
    size_t n = L->len;
    if (n > 0 && s[n - 1] == '\n')
        n--; /* keep_trailing_newline off */
    L->len = n;
    size_t pos = 0;
    bool line_starting = true;
    L->line = 1;
    while (pos < n) {
        /* the next tag opener */
        size_t j = pos;
        int kind = 0; /* 1 var, 2 block, 3 comment */
        while (j + 1 < n) {
            if (s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#')) {
                kind = s[j + 1] == '{' ? 1 : s[j + 1] == '%' ? 2 : 3;
                break;
            }
            j++;
        }
        if (!kind) {
            if (!lx_push(L, T_DATA, s + pos, n - pos))
                return false;
            break;
        }
        size_t tl = j - pos; /* the text before the tag */
        char sign = j + 2 < n ? s[j + 2] : 0;
        if (sign != '-' && sign != '+')
            sign = 0;
        if (sign == '-') {
            tl -= ws_suffix(s + pos, tl);
        } else if (sign != '+' && kind != 1) {
            size_t lp = tl;
            while (lp > 0 && s[pos + lp - 1] != '\n')
                lp--;
            if ((lp > 0 || line_starting) && lp < tl && ws_suffix(s + pos + lp, tl - lp) == tl - lp)
                tl = lp;
        }
        if (tl && !lx_push(L, T_DATA, s + pos, tl))
            return false;
        L->line += count_nl(s + pos, j - pos);
        size_t after = j + 2 + (sign ? 1 : 0);
        if (kind == 3) {
            size_t e = after;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}'))
                e++;
            if (e + 1 >= n)
                return lx_fail(L, RC_ERR_UNSUPPORTED, L->line, "a comment opened and never closed");
            bool minus = e > after && s[e - 1] == '-', plus = e > after && s[e - 1] == '+';
            L->line += count_nl(s + after, e - after);
            e += 2;
            size_t x = e;
            if (minus)
                x += ws_prefix(s + e, n - e);
            else if (!plus && e < n && s[e] == '\n')
                x++;
            L->line += count_nl(s + e, x - e);
            line_starting = x > 0 && s[x - 1] == '\n';
            pos = x;
            continue;
        }
        if (!lx_push(L, kind == 1 ? T_VAR_BEGIN : T_BLOCK_BEGIN, s + j, 0))
            return false;
        pos = after;
        bool nl = false;
        if (!lx_tag(L, kind == 2, &pos, &nl))
            return false;
        line_starting = nl;
    }
    return lx_push(L, T_EOF, s + n, 0);
}

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
} parser;

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
static bool sn_is(const char *s, size_t n, const char *w) { return n == strlen(w) && !memcmp(s, w, n); }

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

/* ---- what the subset knows ---- */

static const char *const k_filters[] = {"abs",   "capitalize", "count",   "d",       "default", "first",  "float",
                                        "indent", "int",       "items",   "join",    "last",    "length", "list",
                                        "lower", "map",        "reject",  "rejectattr", "replace", "reverse", "round",
                                        "safe",  "select",     "selectattr", "string", "title",   "tojson", "trim",
                                        "unique", "upper",     "e",       "escape"};
enum {
    F_ABS,
    F_CAPITALIZE,
    F_COUNT,
    F_D,
    F_DEFAULT,
    F_FIRST,
    F_FLOAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_STRING,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
    F_E,
    F_ESCAPE
};
static const char *const k_tests[] = {"boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even",
                                      "false",   "float",    "ge",      "greaterthan", "gt", "in",      "integer",
                                      "iterable", "le",      "lessthan", "lower",      "lt", "mapping", "ne",
                                      "none",    "number",   "odd",     "sameas",      "sequence", "string", "true",
                                      "undefined", "upper",  "==",      "!=",          "<",  "<=",      ">",
                                      ">="};
enum {
    T_BOOLEAN,
    T_CALLABLE,
    T_DEFINED,
    T_DIVISIBLEBY,
    T_EQ,
    T_EQUALTO,
    T_EVEN,
    T_FALSE,
    T_FLOAT_,
    T_GE,
    T_GREATERTHAN,
    T_GT,
    T_IN,
    T_INTEGER,
    T_ITERABLE,
    T_LE,
    T_LESSTHAN,
    T_LOWER,
    T_LT,
    T_MAPPING,
    T_NE,
    T_NONE,
    T_NUMBER,
    T_ODD,
    T_SAMEAS,
    T_SEQUENCE,
    T_STRING,
    T_TRUE,
    T_UNDEFINED,
    T_UPPER,
    T_OPEQ,
    T_OPNE,
    T_OPLT,
    T_OPLE,
    T_OPGT,
    T_OPGE
};
/* Jinja's own filters and tests that the subset refuses by name (any other
 * name is a compile error in jinja2 too, refused the same way) */
static const char *const k_functions[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};
enum { FN_RANGE, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_DICT };
static const char *const k_methods[] = {"strip", "lstrip", "rstrip", "split",      "startswith", "endswith", "upper",
                                        "lower", "title",  "capitalize", "replace", "find",      "join",     "items",
                                        "keys",  "values", "get"};
enum {
    M_STRIP,
    M_LSTRIP,
    M_RSTRIP,
    M_SPLIT,
    M_STARTSWITH,
    M_ENDSWITH,
    M_UPPER,
    M_LOWER,
    M_TITLE,
    M_CAPITALIZE,
    M_REPLACE,
    M_FIND,
    M_JOIN,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_GET
};

static int find_name(const char *const *list, size_t n, const char *s, size_t sn)
{
    for (size_t i = 0; i < n; i++)
        if (sn_is(s, sn, list[i]))
            return (int)i;
    return -1;
}
#define FIND(list, s, n) find_name(list, sizeof list / sizeof list[0], s, n)

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
    if (callee->k == E_NAME) {
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

static const char *const k_refused_tags[] = {"macro",  "call",    "filter", "include", "import", "from",
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
        node *body = p_body(P, ends, &w), *els = NULL;
        if (!body)
            return NULL;
        P->at++;
        if (w == 0) {
            if (!end_block(P))
                return NULL;
            static const char *const ends2[] = {"endfor", NULL};
            if (!(els = p_body(P, ends2, &w)))
                return NULL;
            P->at++;
        }
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
            static const char *const stray[] = {"elif", "else", "endif", "endfor", "endset", "endgeneration"};
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


/* ======================================================================== */
/* values                                                                   */
/* ======================================================================== */

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_LOOP, V_FUNC, V_METHOD } vtype;

struct jlist;
struct jdict;
struct jloop;
typedef struct jv {
    uint8_t t;
    bool tup; /* V_LIST: a tuple */
    union {
        int64_t i;                   /* BOOL, INT */
        double f;                    /* FLOAT */
        struct {
            const char *p;
            size_t n;
        } s;                         /* STR; UNDEF: the name (p may be NULL) */
        struct jlist *l;             /* LIST */
        struct jdict *d;             /* DICT, NS */
        struct jloop *lp;            /* LOOP */
        struct {
            int id;
            struct jv *self;
        } m;                         /* FUNC (id), METHOD (id, receiver) */
    } u;
} jv;

typedef struct jlist {
    size_t n;
    jv *v;
} jlist;

typedef struct jdict {
    size_t n, cap;
    jv *k, *v;
} jdict;

typedef struct jloop {
    int64_t i, n;
    const jlist *items;
} jloop;

typedef struct {
    const char *name;
    size_t len;
    jv v;
} var;

typedef struct {
    char *p;
    size_t n, cap, max;
    bool over, capped;
} sbuf;

typedef struct {
    const rc_jinja *J;
    arena ar;
    sbuf *out;
    var *vars;
    size_t nv, cv, base;
    int64_t steps;
    int flow; /* 1 break, 2 continue */
    int line;
    rc_status st;
    char err[512];
} ctx;

static const jv k_undef = {.t = V_UNDEF};
static const jv k_none = {.t = V_NONE};

static bool fail(ctx *C, rc_status st, const char *fmt, ...)
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

static bool oom(ctx *C)
{
    if (C->ar.capped)
        return fail(C, RC_ERR_UNSUPPORTED, "uses more than %zu MiB of values", RC_JINJA_MAX_MEMORY >> 20);
    return fail(C, RC_ERR_NOMEM, "out of memory");
}

static bool too_big(ctx *C)
{
    return fail(C, RC_ERR_UNSUPPORTED, "uses more than %zu MiB of values", RC_JINJA_MAX_MEMORY >> 20);
}

static bool step(ctx *C, size_t work)
{
    C->steps += 1 + (int64_t)(work >> 6);
    if (C->steps > RC_JINJA_MAX_STEPS)
        return fail(C, RC_ERR_UNSUPPORTED, "takes more than %d steps", RC_JINJA_MAX_STEPS);
    return true;
}

static void *C_alloc(ctx *C, size_t n)
{
    void *p = ar_alloc(&C->ar, n);
    if (!p)
        oom(C);
    return p;
}

static void sb_add(sbuf *b, const char *s, size_t n)
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
static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static jv mkstr(const char *p, size_t n)
{
    jv v = {.t = V_STR};
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}
static jv mkint(int64_t i)
{
    jv v = {.t = V_INT};
    v.u.i = i;
    return v;
}
static jv mkbool(bool b)
{
    jv v = {.t = V_BOOL};
    v.u.i = b;
    return v;
}
static jv mkfloat(double f)
{
    jv v = {.t = V_FLOAT};
    v.u.f = f;
    return v;
}
static jv undef_named(const char *p, size_t n)
{
    jv v = {.t = V_UNDEF};
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}

static bool new_list(ctx *C, size_t n, jv *out, bool tup)
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
static char *new_str(ctx *C, size_t n, jv *out)
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

static const char *type_name(const jv *v)
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
    default: return "function";
    }
}

static bool undefined_error(ctx *C, const jv *v)
{
    if (v->u.s.p)
        return fail(C, RC_ERR_UNSUPPORTED, "'%.*s' is undefined", (int)(v->u.s.n > 60 ? 60 : v->u.s.n), v->u.s.p);
    return fail(C, RC_ERR_UNSUPPORTED, "a value is undefined");
}

static bool truthy(const jv *v)
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

static bool is_num(const jv *v) { return v->t == V_BOOL || v->t == V_INT || v->t == V_FLOAT; }
static double num_f(const jv *v) { return v->t == V_FLOAT ? v->u.f : (double)v->u.i; }

/* ---- equality and order ---- */

static bool veq(const jv *a, const jv *b, int depth);

static bool dict_find(const jdict *d, const jv *k, size_t *at)
{
    for (size_t i = 0; i < d->n; i++)
        if (veq(&d->k[i], k, 0)) {
            *at = i;
            return true;
        }
    return false;
}

static bool dict_find_str(const jdict *d, const char *s, size_t n, size_t *at)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == V_STR && d->k[i].u.s.n == n && !memcmp(d->k[i].u.s.p, s, n)) {
            *at = i;
            return true;
        }
    return false;
}

static bool veq(const jv *a, const jv *b, int depth)
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
static bool vcmp(ctx *C, const jv *a, const jv *b, int *r, int depth)
{
    if (depth > 200)
        return fail(C, RC_ERR_UNSUPPORTED, "values nested too deeply to compare");
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
        return step(C, m);
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
    return fail(C, RC_ERR_UNSUPPORTED, "cannot order a %s and a %s", type_name(a), type_name(b));
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
        return fail(C, RC_ERR_UNSUPPORTED, "values nested too deeply to print");
    if (!step(C, 0))
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
        return step(C, v->u.s.n);
    case V_LIST:
        sb_str(b, v->tup ? "(" : "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
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
        for (size_t i = 0; i < v->u.d->n; i++) {
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
    default: return fail(C, RC_ERR_UNSUPPORTED, "cannot print a %s", type_name(v));
    }
}

static bool sb_done(ctx *C, sbuf *b, jv *out)
{
    if (b->over) {
        free(b->p);
        if (b->capped)
            return fail(C, RC_ERR_UNSUPPORTED, "makes a string of more than %zu MiB", b->max >> 20);
        return oom(C);
    }
    char *p = new_str(C, b->n, out);
    if (p && b->n)
        memcpy(p, b->p, b->n);
    free(b->p);
    return p != NULL;
}

/* str(v) as a value */
static bool to_str(ctx *C, const jv *v, jv *out)
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

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) */
typedef struct {
    bool ascii, sort;
    const char *ind;
    size_t indn;
    bool indent;
    const char *isep, *ksep;
    size_t isepn, ksepn;
} jopt;

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

static bool vjson(ctx *C, sbuf *b, const jv *v, const jopt *o, int depth)
{
    if (depth > 200)
        return fail(C, RC_ERR_UNSUPPORTED, "values nested too deeply for tojson");
    if (!step(C, 0))
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
    case V_STR: json_str(b, v->u.s.p, v->u.s.n, o->ascii); return step(C, v->u.s.n);
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
            return fail(C, RC_ERR_NOMEM, "out of memory");
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
                ok = fail(C, RC_ERR_UNSUPPORTED, "tojson: a %s key", type_name(k));
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
    case V_UNDEF: return fail(C, RC_ERR_UNSUPPORTED, "tojson of an undefined value");
    default: return fail(C, RC_ERR_UNSUPPORTED, "tojson of a %s", type_name(v));
    }
}

/* ---- JSON input to values ---- */

static bool from_json(ctx *C, const json_t *j, jv *out, int depth)
{
    if (depth > 200)
        return fail(C, RC_ERR_UNSUPPORTED, "a variable nested too deeply");
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
        return step(C, 0);
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
        return step(C, 0);
    }
    }
    return fail(C, RC_ERR_INTERNAL, "a JSON value of an unknown type");
}

/* ---- variables ---- */

static bool var_lookup(const ctx *C, const char *s, size_t n, jv *out)
{
    for (size_t i = C->nv; i-- > 0;)
        if (C->vars[i].len == n && !memcmp(C->vars[i].name, s, n)) {
            *out = C->vars[i].v;
            return true;
        }
    return false;
}

static bool var_set(ctx *C, const char *s, size_t n, const jv *v)
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
            return fail(C, RC_ERR_NOMEM, "out of memory");
        C->vars = q;
        C->cv = c;
    }
    C->vars[C->nv].name = s;
    C->vars[C->nv].len = n;
    C->vars[C->nv].v = *v;
    C->nv++;
    return true;
}

/* ---- string helpers (code points) ---- */

/* the byte offsets of code points: off[0..cnt], off[cnt] = n */
static size_t *cp_offsets(ctx *C, const char *s, size_t n, size_t *cnt)
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
static jv vstrip(const jv *s, int which, const char *chars, size_t cn)
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
static bool vcase(ctx *C, const jv *s, int how, jv *out)
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
            return fail(C, RC_ERR_UNSUPPORTED, "changes the case of U+%04X, whose case mapping ratiocheck does not implement",
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
    return step(C, n) && sb_done(C, &b, out);
}

static bool vconcat(ctx *C, const char *a, size_t an, const char *b, size_t bn, jv *out)
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
    return step(C, an + bn);
}

static const char *find_sub(const char *h, size_t hn, const char *nd, size_t nn)
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
static bool to_items(ctx *C, const jv *v, jlist **out)
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
        return step(C, v->u.s.n);
    }
    default: return fail(C, RC_ERR_UNSUPPORTED, "a %s is not iterable", type_name(v));
    }
}

/* ======================================================================== */
/* evaluation                                                               */
/* ======================================================================== */

static bool ev(ctx *C, const node *x, jv *r);

static bool getattr_v(ctx *C, const jv *o, const char *s, size_t n, jv *r);

/* obj[key] as jinja2's environment.getitem */
static bool getitem_v(ctx *C, const jv *o, const jv *k, jv *r)
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
        if (!step(C, o->u.s.n))
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
        if (!step(C, o->u.d->n << 6))
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
static bool getattr_v(ctx *C, const jv *o, const char *s, size_t n, jv *r)
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
        if (!step(C, o->u.d->n << 6))
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

/* a call's arguments: positional values and keyword values by name */
typedef struct {
    jv pos[8];
    size_t np;
    const char *kn[8];
    size_t kl[8];
    jv kv[8];
    size_t nkw;
} args;

static bool eval_args(ctx *C, const node *x, args *a, size_t skip)
{
    a->np = a->nkw = 0;
    for (size_t i = skip; i < x->nk; i++) {
        const node *k = x->kids[i];
        if (k->k == E_KWARG) {
            if (a->nkw == 8)
                return fail(C, RC_ERR_UNSUPPORTED, "more than 8 keyword arguments");
            a->kn[a->nkw] = k->s;
            a->kl[a->nkw] = k->sn;
            if (!ev(C, k->a, &a->kv[a->nkw]))
                return false;
            a->nkw++;
        } else {
            if (a->np == 8)
                return fail(C, RC_ERR_UNSUPPORTED, "more than 8 arguments");
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
        return fail(C, RC_ERR_UNSUPPORTED, "%s takes at most %zu arguments", what, maxpos);
    for (size_t k = 0; k < a->nkw; k++) {
        bool ok = false;
        for (size_t i = 0; names && names[i] && !ok; i++)
            ok = sn_is(a->kn[k], a->kl[k], names[i]);
        if (!ok)
            return fail(C, RC_ERR_UNSUPPORTED, "%s has no argument '%.*s'", what, (int)(a->kl[k] > 40 ? 40 : a->kl[k]), a->kn[k]);
    }
    return true;
}

static bool need_str(ctx *C, const jv *v, const char *what)
{
    if (v->t == V_STR)
        return true;
    if (v->t == V_UNDEF)
        return undefined_error(C, v);
    return fail(C, RC_ERR_UNSUPPORTED, "%s needs a string, not a %s", what, type_name(v));
}

static bool need_int(ctx *C, const jv *v, const char *what)
{
    if (v->t == V_INT || v->t == V_BOOL)
        return true;
    if (v->t == V_UNDEF)
        return undefined_error(C, v);
    return fail(C, RC_ERR_UNSUPPORTED, "%s needs an integer, not a %s", what, type_name(v));
}

static bool run_test(ctx *C, int id, const jv *v, const args *a, bool *r);

static bool binary(ctx *C, int op, const jv *a, const jv *b, jv *r);

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
            return fail(C, RC_ERR_UNSUPPORTED, "split with an empty separator");
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
    return step(C, n);
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
            if (!step(C, nw->u.s.n)) {
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
            if (!step(C, nw->u.s.n)) {
                free(b.p);
                return false;
            }
        }
    }
    return step(C, n) && sb_done(C, &b, r);
}

static bool call_method(ctx *C, int id, const jv *self, const args *a, jv *r)
{
    const char *nm = k_methods[id];
    if (id < M_ITEMS && self->t != V_STR)
        return fail(C, RC_ERR_UNSUPPORTED, "%s() of a %s", nm, type_name(self));
    if (id >= M_ITEMS && self->t != V_DICT)
        return fail(C, RC_ERR_UNSUPPORTED, "%s() of a %s", nm, type_name(self));
    if (a->nkw && id != M_SPLIT)
        return fail(C, RC_ERR_UNSUPPORTED, "%s() with keyword arguments", nm);
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        if (a->np > 1)
            return fail(C, RC_ERR_UNSUPPORTED, "%s() takes at most 1 argument", nm);
        const jv *ch = a->np ? &a->pos[0] : NULL;
        if (ch && ch->t != V_NONE && !need_str(C, ch, nm))
            return false;
        bool byc = ch && ch->t == V_STR;
        *r = vstrip(self, id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2, byc ? ch->u.s.p : NULL, byc ? ch->u.s.n : 0);
        return step(C, self->u.s.n);
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
            return fail(C, RC_ERR_UNSUPPORTED, "%s() takes 1 argument", nm);
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
            return fail(C, RC_ERR_UNSUPPORTED, "%s() takes no arguments", nm);
        return vcase(C, self, id == M_UPPER ? 1 : id == M_LOWER ? 2 : id == M_TITLE ? 3 : 4, r);
    case M_REPLACE:
        if (a->np < 2 || a->np > 3)
            return fail(C, RC_ERR_UNSUPPORTED, "replace() takes 2 or 3 arguments");
        if (a->np == 3 && !need_int(C, &a->pos[2], "replace()"))
            return false;
        return vreplace(C, self, &a->pos[0], &a->pos[1], a->np == 3 ? a->pos[2].u.i : -1, r);
    case M_FIND: {
        if (a->np != 1 || !need_str(C, &a->pos[0], "find()"))
            return a->np != 1 ? fail(C, RC_ERR_UNSUPPORTED, "find() takes 1 argument") : false;
        const char *f = find_sub(self->u.s.p, self->u.s.n, a->pos[0].u.s.p, a->pos[0].u.s.n);
        *r = mkint(f ? (int64_t)u8_count(self->u.s.p, (size_t)(f - self->u.s.p)) : -1);
        return step(C, self->u.s.n);
    }
    case M_JOIN: {
        if (a->np != 1)
            return fail(C, RC_ERR_UNSUPPORTED, "join() takes 1 argument");
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
        return step(C, b.n) && sb_done(C, &b, r);
    }
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: {
        if (a->np)
            return fail(C, RC_ERR_UNSUPPORTED, "%s() takes no arguments", nm);
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
        return step(C, d->n);
    }
    case M_GET: {
        if (a->np < 1 || a->np > 2)
            return fail(C, RC_ERR_UNSUPPORTED, "get() takes 1 or 2 arguments");
        size_t at;
        *r = dict_find(self->u.d, &a->pos[0], &at) ? self->u.d->v[at] : a->np == 2 ? a->pos[1] : k_none;
        return true;
    }
    }
    return fail(C, RC_ERR_INTERNAL, "an unknown method");
}

static bool new_dict(ctx *C, size_t cap, jdict **out)
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

static bool dict_put(ctx *C, jdict *d, const jv *k, const jv *v)
{
    size_t at;
    if (!step(C, d->n << 6)) /* a linear search: one step per key */
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
    return step(C, 0);
}

static bool call_function(ctx *C, const node *x, jv *r)
{
    args a;
    if (!eval_args(C, x, &a, 0))
        return false;
    switch (x->id) {
    case FN_RANGE: {
        if (a.nkw || a.np < 1 || a.np > 3)
            return fail(C, RC_ERR_UNSUPPORTED, "range() takes 1 to 3 integer arguments");
        for (size_t i = 0; i < a.np; i++)
            if (!need_int(C, &a.pos[i], "range()"))
                return false;
        int64_t lo = a.np > 1 ? a.pos[0].u.i : 0, hi = a.np > 1 ? a.pos[1].u.i : a.pos[0].u.i,
                st = a.np > 2 ? a.pos[2].u.i : 1;
        if (st == 0)
            return fail(C, RC_ERR_UNSUPPORTED, "range() with a zero step");
        double cnt = st > 0 ? ceil(((double)hi - (double)lo) / (double)st) : ceil(((double)lo - (double)hi) / (double)-st);
        if (cnt < 0)
            cnt = 0;
        if (cnt > RC_JINJA_MAX_RANGE)
            return fail(C, RC_ERR_UNSUPPORTED, "range() of more than %d items (jinja2's sandbox limit)", RC_JINJA_MAX_RANGE);
        if (!new_list(C, (size_t)cnt, r, false))
            return false;
        for (size_t i = 0; i < (size_t)cnt; i++)
            r->u.l->v[i] = mkint(lo + (int64_t)i * st);
        return step(C, (size_t)cnt);
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        jdict *d;
        if (!new_dict(C, a.nkw + 4, &d))
            return false;
        if (a.np > 1)
            return fail(C, RC_ERR_UNSUPPORTED, "%s() takes at most one positional argument", k_functions[x->id]);
        if (a.np == 1) {
            if (a.pos[0].t != V_DICT)
                return fail(C, RC_ERR_UNSUPPORTED, "%s() of a %s", k_functions[x->id], type_name(&a.pos[0]));
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
                    return fail(C, RC_ERR_UNSUPPORTED, "a namespace attribute starting with '_'");
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
        return fail(C, RC_ERR_FORMAT, "raises \"%s\"", msg);
    }
    case FN_STRFTIME: {
        if (a.np != 1 || a.nkw || !need_str(C, &a.pos[0], "strftime_now()"))
            return a.np != 1 || a.nkw ? fail(C, RC_ERR_UNSUPPORTED, "strftime_now() takes 1 argument") : false;
        struct tm tm;
        if (C->J->fixed_time)
            tm = C->J->tm;
        else {
            time_t now = time(NULL);
            if (!localtime_r(&now, &tm))
                return fail(C, RC_ERR_UNSUPPORTED, "strftime_now(): no local time");
        }
        char fmt[128], outb[512];
        if (a.pos[0].u.s.n >= sizeof fmt || memchr(a.pos[0].u.s.p, '\0', a.pos[0].u.s.n))
            return fail(C, RC_ERR_UNSUPPORTED, "strftime_now() with a format over %zu bytes", sizeof fmt - 1);
        memcpy(fmt, a.pos[0].u.s.p, a.pos[0].u.s.n);
        fmt[a.pos[0].u.s.n] = '\0';
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        size_t w = a.pos[0].u.s.n ? strftime(outb, sizeof outb, fmt, &tm) : 0; /* the template's format, as Python's */
#pragma GCC diagnostic pop
        if (a.pos[0].u.s.n && w == 0)
            return fail(C, RC_ERR_UNSUPPORTED, "strftime_now(\"%s\") gives nothing or too much", fmt);
        char *p = new_str(C, w, r);
        if (p && w)
            memcpy(p, outb, w);
        return p != NULL;
    }
    }
    return fail(C, RC_ERR_INTERNAL, "an unknown function");
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

static bool apply_filter(ctx *C, int id, const jv *v, const args *a, jv *r);

static bool run_test(ctx *C, int id, const jv *v, const args *a, bool *r)
{
    const jv *x = a->np ? &a->pos[0] : NULL;
    if (a->nkw)
        return fail(C, RC_ERR_UNSUPPORTED, "test '%s' with keyword arguments", k_tests[id]);
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
    case T_CALLABLE: *r = v->t == V_FUNC || v->t == V_METHOD; return true;
    case T_ODD:
    case T_EVEN:
        if (!need_int(C, v, k_tests[id]))
            return false;
        *r = ((v->u.i % 2) != 0) == (id == T_ODD);
        return true;
    case T_DIVISIBLEBY:
        if (!x || !need_int(C, v, "divisibleby") || !need_int(C, x, "divisibleby"))
            return x ? false : fail(C, RC_ERR_UNSUPPORTED, "divisibleby needs an argument");
        if (x->u.i == 0)
            return fail(C, RC_ERR_UNSUPPORTED, "divisibleby(0)");
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
        return step(C, v->u.s.n);
    }
    case T_SAMEAS:
        if (!x)
            return fail(C, RC_ERR_UNSUPPORTED, "sameas needs an argument");
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
        return fail(C, RC_ERR_UNSUPPORTED, "test '%s' needs an argument", k_tests[id]);
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
        return fail(C, RC_ERR_UNSUPPORTED, "%s with keyword arguments", k_filters[id]);
    size_t first = attr ? 1 : 0;
    if (attr && a->np < 1)
        return fail(C, RC_ERR_UNSUPPORTED, "%s needs an attribute", k_filters[id]);
    int tid = -1;
    args ta = {.np = 0};
    if (a->np > first) {
        if (!need_str(C, &a->pos[first], k_filters[id]))
            return false;
        tid = FIND(k_tests, a->pos[first].u.s.p, a->pos[first].u.s.n);
        if (tid < 0)
            return fail(C, RC_ERR_UNSUPPORTED, "%s with the test '%.*s', which the subset does not have", k_filters[id],
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
        if (!step(C, 0))
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
    return step(C, n) && sb_done(C, &b, r);
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
            return fail(C, RC_ERR_UNSUPPORTED, "indent width outside 0..256");
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
    return step(C, n) && sb_done(C, &b, r);
}

static bool apply_filter(ctx *C, int id, const jv *v, const args *a, jv *r)
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
        return step(C, s.u.s.n);
    }
    case F_LENGTH:
    case F_COUNT:
        if (a->np || a->nkw)
            return fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
        switch (v->t) {
        case V_UNDEF: *r = mkint(0); return true;
        case V_STR: *r = mkint((int64_t)u8_count(v->u.s.p, v->u.s.n)); return step(C, v->u.s.n);
        case V_LIST: *r = mkint((int64_t)v->u.l->n); return true;
        case V_DICT:
        case V_NS: *r = mkint((int64_t)v->u.d->n); return true;
        default: return fail(C, RC_ERR_UNSUPPORTED, "length of a %s", type_name(v));
        }
    case F_STRING:
    case F_SAFE:
        if (a->np || a->nkw)
            return fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
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
            return fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
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
            return fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
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
        return step(C, s.u.s.n) && sb_done(C, &b, r);
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
        return step(C, b.n) && sb_done(C, &b, r);
    }
    case F_FIRST:
    case F_LAST: {
        if (a->np || a->nkw)
            return fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
        jlist *it;
        if (!to_items(C, v, &it))
            return false;
        *r = it->n ? it->v[id == F_FIRST ? 0 : it->n - 1] : k_undef;
        return true;
    }
    case F_LIST:
    case F_REVERSE: {
        if (a->np || a->nkw)
            return fail(C, RC_ERR_UNSUPPORTED, "%s takes no arguments", fn);
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
            return step(C, v->u.s.n);
        }
        jlist *it;
        if (!to_items(C, v, &it) || !new_list(C, it->n, r, false))
            return false;
        for (size_t i = 0; i < it->n; i++)
            r->u.l->v[i] = it->v[id == F_LIST ? i : it->n - 1 - i];
        return step(C, it->n);
    }
    case F_ITEMS: {
        if (a->np || a->nkw)
            return fail(C, RC_ERR_UNSUPPORTED, "items takes no arguments");
        if (v->t == V_UNDEF)
            return new_list(C, 0, r, false);
        if (v->t != V_DICT)
            return fail(C, RC_ERR_UNSUPPORTED, "items of a %s", type_name(v));
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
                return fail(C, RC_ERR_UNSUPPORTED, "map has no argument '%.*s'", (int)(a->kl[k] > 40 ? 40 : a->kl[k]),
                            a->kn[k]);
        }
        int fid = -1;
        args fa = {.np = 0};
        if (!at) {
            if (a->np < 1 || !need_str(C, &a->pos[0], "map"))
                return a->np < 1 ? fail(C, RC_ERR_UNSUPPORTED, "map needs a filter name or attribute=") : false;
            fid = FIND(k_filters, a->pos[0].u.s.p, a->pos[0].u.s.n);
            if (fid < 0 || fid == F_MAP)
                return fail(C, RC_ERR_UNSUPPORTED, "map with the filter '%.*s', which the subset does not have",
                            (int)(a->pos[0].u.s.n > 40 ? 40 : a->pos[0].u.s.n), a->pos[0].u.s.p);
            for (size_t i = 1; i < a->np; i++)
                fa.pos[fa.np++] = a->pos[i];
        } else if (a->np)
            return fail(C, RC_ERR_UNSUPPORTED, "map with attribute= and positional arguments");
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
        return step(C, it->n);
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
            return fail(C, RC_ERR_UNSUPPORTED, "int with a base");
        jv d = dv ? *dv : (id == F_INT ? mkint(0) : mkfloat(0.0));
        if (is_num(v)) {
            if (id == F_FLOAT)
                *r = mkfloat(num_f(v));
            else if (v->t == V_FLOAT) {
                if (!(fabs(v->u.f) < 9.2e18))
                    return fail(C, RC_ERR_UNSUPPORTED, "int of %g", v->u.f);
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
            return fail(C, RC_ERR_UNSUPPORTED, "abs takes no arguments");
        if (v->t == V_FLOAT)
            *r = mkfloat(fabs(v->u.f));
        else if (v->t == V_INT || v->t == V_BOOL) {
            if (v->u.i == INT64_MIN)
                return fail(C, RC_ERR_UNSUPPORTED, "an integer beyond 64 bits");
            *r = mkint(v->u.i < 0 ? -v->u.i : v->u.i);
        } else
            return fail(C, RC_ERR_UNSUPPORTED, "abs of a %s", type_name(v));
        return true;
    case F_ROUND: {
        static const char *const names[] = {"precision", "method", NULL};
        if (!check_args(C, a, 2, names, "round"))
            return false;
        const jv *pv = arg(a, 0, "precision"), *mv = arg(a, 1, "method");
        if (pv && !(pv->t == V_INT && pv->u.i == 0))
            return fail(C, RC_ERR_UNSUPPORTED, "round with a precision other than 0");
        if (!is_num(v))
            return fail(C, RC_ERR_UNSUPPORTED, "round of a %s", type_name(v));
        double f = num_f(v);
        if (!mv || (mv->t == V_STR && sn_is(mv->u.s.p, mv->u.s.n, "common")))
            f = nearbyint(f);
        else if (mv->t == V_STR && sn_is(mv->u.s.p, mv->u.s.n, "ceil"))
            f = ceil(f);
        else if (mv->t == V_STR && sn_is(mv->u.s.p, mv->u.s.n, "floor"))
            f = floor(f);
        else
            return fail(C, RC_ERR_UNSUPPORTED, "round with an unknown method");
        *r = mkfloat(f);
        return true;
    }
    case F_REPLACE: {
        static const char *const names[] = {"old", "new", "count", NULL};
        if (!check_args(C, a, 3, names, "replace"))
            return false;
        const jv *o = arg(a, 0, "old"), *nw = arg(a, 1, "new"), *cnt = arg(a, 2, "count");
        if (!o || !nw)
            return fail(C, RC_ERR_UNSUPPORTED, "replace needs old and new");
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
                return fail(C, RC_ERR_UNSUPPORTED, "tojson indent outside 0..64");
        }
        if (sv && sv->t != V_NONE) {
            if (sv->t != V_LIST || sv->u.l->n != 2 || sv->u.l->v[0].t != V_STR || sv->u.l->v[1].t != V_STR)
                return fail(C, RC_ERR_UNSUPPORTED, "tojson separators that are not two strings");
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
            if (!step(C, w << 6))
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
    return fail(C, RC_ERR_INTERNAL, "an unknown filter");
}

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
            return fail(C, RC_ERR_UNSUPPORTED, "integer division or modulo by zero");
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
        return fail(C, RC_ERR_UNSUPPORTED, "an integer beyond 64 bits");
    *r = mkint(x);
    return true;
}

/* arithmetic (op < 100) and comparisons (100 + CMP_x) */
static bool binary(ctx *C, int op, const jv *a, const jv *b, jv *r)
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
                if (!step(C, b->u.s.n))
                    return false;
            } else if (b->t == V_LIST) {
                if (!step(C, b->u.l->n << 6))
                    return false;
                for (size_t i = 0; i < b->u.l->n && !in; i++)
                    in = veq(a, &b->u.l->v[i], 0);
            } else if (b->t == V_DICT) {
                size_t at;
                if (!step(C, b->u.d->n << 6))
                    return false;
                in = dict_find(b->u.d, a, &at);
            } else if (b->t != V_UNDEF)
                return fail(C, RC_ERR_UNSUPPORTED, "'in' a %s", type_name(b));
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
                return fail(C, RC_ERR_UNSUPPORTED, "division by zero");
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
                return fail(C, RC_ERR_UNSUPPORTED, "float division or modulo by zero");
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
        return step(C, n);
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
            return step(C, a->u.s.n * (size_t)k);
        }
        if (k && a->u.l->n > RC_JINJA_MAX_MEMORY / sizeof(jv) / (size_t)k)
            return too_big(C);
        size_t n = a->u.l->n * (size_t)k;
        if (!new_list(C, n, r, a->tup))
            return false;
        for (int64_t i = 0; i < k && a->u.l->n; i++)
            memcpy(r->u.l->v + (size_t)i * a->u.l->n, a->u.l->v, a->u.l->n * sizeof(jv));
        return step(C, n);
    }
    if (op == OP_MUL && (b->t == V_STR || b->t == V_LIST) && (a->t == V_INT || a->t == V_BOOL))
        return binary(C, op, b, a, r);
    if (op == OP_MOD && a->t == V_STR)
        return fail(C, RC_ERR_UNSUPPORTED, "unsupported Jinja construct 'string %% formatting'");
    return fail(C, RC_ERR_UNSUPPORTED, "unsupported operand types for %s: '%s' and '%s'", sym[op], type_name(a),
                type_name(b));
}

static bool slice_v(ctx *C, const jv *o, const jv *s0, const jv *s1, const jv *s2, jv *r)
{
    if (o->t == V_UNDEF)
        return undefined_error(C, o);
    if (o->t != V_LIST && o->t != V_STR)
        return fail(C, RC_ERR_UNSUPPORTED, "a slice of a %s", type_name(o));
    const jv *pv[3] = {s0, s1, s2};
    for (int i = 0; i < 3; i++)
        if (pv[i]->t != V_NONE && !need_int(C, pv[i], "a slice"))
            return false;
    int64_t step_ = s2->t == V_NONE ? 1 : s2->u.i;
    if (step_ == 0)
        return fail(C, RC_ERR_UNSUPPORTED, "a slice step of zero");
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
        return step(C, k);
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
    return step(C, o->u.s.n);
}

static bool ev(ctx *C, const node *x, jv *r)
{
    if (!step(C, 0))
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
                return fail(C, RC_ERR_UNSUPPORTED, "a list as a dict key");
            if (k.t == V_DICT || k.t == V_UNDEF)
                return fail(C, RC_ERR_UNSUPPORTED, "a %s as a dict key", type_name(&k));
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
            return call_function(C, x, r);
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
                return fail(C, RC_ERR_UNSUPPORTED, "an integer beyond 64 bits");
            *r = mkint(x->k == E_NEG ? -v.u.i : v.u.i);
        } else
            return fail(C, RC_ERR_UNSUPPORTED, "bad operand type for unary %c: '%s'", x->k == E_NEG ? '-' : '+',
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
    default: return fail(C, RC_ERR_INTERNAL, "an unknown expression");
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
            return fail(C, RC_ERR_UNSUPPORTED, "cannot assign an attribute of '%.*s', which is not a namespace",
                        (int)(t->a->sn > 40 ? 40 : t->a->sn), t->a->s);
        if (t->sn && t->s[0] == '_')
            return fail(C, RC_ERR_UNSUPPORTED, "a namespace attribute starting with '_'");
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
        return fail(C, RC_ERR_UNSUPPORTED, "cannot unpack %zu values into %zu names", it->n, t->nk);
    for (size_t i = 0; i < t->nk; i++)
        if (!var_set(C, t->kids[i]->s, t->kids[i]->sn, &it->v[i]))
            return false;
    return true;
}

static bool emit(ctx *C, const char *s, size_t n)
{
    sb_add(C->out, s, n);
    if (C->out->over)
        return C->out->capped ? fail(C, RC_ERR_UNSUPPORTED, "renders more than %zu MiB", C->out->max >> 20) : oom(C);
    return step(C, n);
}

static bool exec_for(ctx *C, const node *x)
{
    jv seq;
    if (!ev(C, x->b, &seq))
        return false;
    jlist *it;
    if (seq.t == V_NONE || (seq.t != V_LIST && seq.t != V_DICT && seq.t != V_STR && seq.t != V_UNDEF))
        return fail(C, RC_ERR_UNSUPPORTED, "a for loop over a %s", type_name(&seq));
    if (!to_items(C, &seq, &it))
        return false;
    size_t saved_base = C->base, saved_nv = C->nv;
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
        ok = var_set(C, "loop", 4, &lv) && assign(C, x->a, &it->v[i]) && step(C, 0) && exec_body(C, x->kids[0]);
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
        if (!step(C, 0))
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
            } else {
                jv s;
                if (!to_str(C, &v, &s) || !emit(C, s.u.s.p, s.u.s.n))
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
        default: return fail(C, RC_ERR_INTERNAL, "an unknown statement");
        }
    }
    return true;
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
