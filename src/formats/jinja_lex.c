/* The Jinja subset interpreter (jinja_impl.h): the arena, Python's whitespace
 * and UTF-8, the lexer. */
#include "jinja_impl.h"

/* ======================================================================== */
/* arena                                                                    */
/* ======================================================================== */

void *ar_alloc(arena *a, size_t n)
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

void ar_free(arena *a)
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

bool py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

/* the code point at s[0..n) (valid UTF-8, n > 0); *len its bytes */
uint32_t u8_cp(const char *str, size_t n, size_t *len)
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
size_t u8_prev(const char *s, size_t e)
{
    size_t b = e - 1;
    while (b > 0 && ((unsigned char)s[b] & 0xc0) == 0x80)
        b--;
    return b;
}

size_t u8_put(char *o, uint32_t cp)
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

size_t u8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

/* ======================================================================== */
/* lexer                                                                    */
/* ======================================================================== */

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

int count_nl(const char *s, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += s[i] == '\n';
    return c;
}

/* bytes of Python whitespace at the start of s[0..n) */
size_t ws_prefix(const char *s, size_t n)
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
bool is_dig(char c) { return c >= '0' && c <= '9'; }

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

bool lx_run(lexer *L)
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
