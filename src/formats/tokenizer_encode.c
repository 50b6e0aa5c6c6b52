/* tokenizer.json's encoding (rc_tokenizer_encode): normalizers, pre-tokenizers,
 * BPE, added tokens, within the per-call limits (README "Tokenizer"). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "json_util.h"
#include "tokenizer_impl.h"
#include "util.h"

/* ---- encoding ------------------------------------------------------------- */


bool pl_push(plist *l, const char *s, size_t n)
{
    if (n == 0)
        return true;
    if (l->n == l->cap) {
        size_t c = l->cap ? 2 * l->cap : 16;
        piece *q = realloc(l->v, c * sizeof *q);
        if (!q)
            return false;
        l->v = q;
        l->cap = c;
    }
    char *d = malloc(n + 1);
    if (!d)
        return false;
    memcpy(d, s, n);
    d[n] = '\0';
    l->v[l->n++] = (piece){d, n};
    return true;
}

void pl_free(plist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].s);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* ---- per-call limits -------------------------------------------------------- */

/* one encode call: how much text its steps may still make, and its regex budget */
typedef struct {
    const rc_tokenizer *t;
    int64_t grow_max;  /* GROW_K x input + GROW_C */
    int64_t norm_used; /* normalized bytes so far (every segment between added tokens) */
    int64_t pre_used;  /* pre-tokenized bytes so far */
    int64_t re_budget; /* regex retry steps left */
    pcre2_match_context *mc;
} enc_ctx;

int64_t grow_limit(int64_t in)
{
    int64_t g;
    if (!rc_mul_i64(in, GROW_K, &g) || !rc_add_i64(g, GROW_C, &g))
        return INT64_MAX;
    return g;
}

rc_status too_large(const rc_tokenizer *t, const char *stage, int64_t in, int64_t max)
{
    return rc_errorf(RC_ERR_UNSUPPORTED,
                     "%s: the %s would make more than %lld bytes from %lld bytes of text (ratiocheck's limit: %d x the "
                     "input + %lld KiB)",
                     t->path, stage, (long long)max, (long long)in, GROW_K, (long long)(GROW_C >> 10));
}

static bool sb_reserve(sbuf *b, size_t n)
{
    if (n + 1 <= b->cap)
        return true;
    char *q = realloc(b->p, n + 1);
    if (!q)
        return false;
    b->p = q;
    b->cap = n + 1;
    return true;
}

/* replace every occurrence of pat by rep (leftmost, not overlapping) into
 * out; 1 ok, 0 out of memory, -1 the result would exceed max bytes (checked
 * before anything is built) */
int replace_all(const char *s, size_t n, const char *pat, const char *rep, sbuf *out, int64_t max)
{
    size_t lp = strlen(pat), lr = strlen(rep);
    out->n = 0;
    int64_t size = (int64_t)n, occ = 0;
    if (lp) {
        for (size_t i = 0; i + lp <= n;)
            if (s[i] == pat[0] && memcmp(s + i, pat, lp) == 0) {
                occ++;
                i += lp;
            } else {
                i++;
            }
        if (lr > lp && (!rc_mul_i64(occ, (int64_t)(lr - lp), &size) || !rc_add_i64(size, (int64_t)n, &size)))
            return -1;
        if (lr < lp)
            size = (int64_t)n - occ * (int64_t)(lp - lr);
    }
    if (size > max)
        return -1;
    if (!sb_reserve(out, (size_t)size))
        return 0;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (lp && i + lp <= n && s[i] == pat[0] && memcmp(s + i, pat, lp) == 0) {
            memcpy(out->p + o, rep, lr);
            o += lr;
            i += lp;
        } else {
            out->p[o++] = s[i++];
        }
    }
    out->p[o] = '\0';
    out->n = o;
    return 1;
}

static rc_status normalize(enc_ctx *c, const char *text, size_t len, sbuf *out)
{
    const rc_tokenizer *t = c->t;
    const int64_t room = c->grow_max - c->norm_used; /* what this segment may produce */
    out->n = 0;
    if ((int64_t)len > room)
        return too_large(t, "normalizers", (int64_t)len, c->grow_max);
    if (!sb_add(out, text, len))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    for (int i = 0; i < t->n_norms; i++) {
        const norm_step *s = &t->norms[i];
        sbuf nb = {0};
        int ok = 1;
        switch (s->kind) {
        case N_NFC:
        case N_NFD:
        case N_NFKC:
        case N_NFKD: {
            utf8proc_option_t opt = UTF8PROC_STABLE |
                                    (s->kind == N_NFC || s->kind == N_NFKC ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE) |
                                    (s->kind == N_NFKC || s->kind == N_NFKD ? UTF8PROC_COMPAT : 0);
            /* count the decomposed code points first: utf8proc_map allocates
             * 4 bytes for each */
            utf8proc_ssize_t ncp = utf8proc_decompose((const utf8proc_uint8_t *)out->p, (utf8proc_ssize_t)out->n, NULL,
                                                      0, opt);
            if (ncp > room)
                return too_large(t, "normalizers", (int64_t)len, c->grow_max);
            utf8proc_uint8_t *r = NULL;
            utf8proc_ssize_t rl = ncp < 0 ? ncp : utf8proc_map((const utf8proc_uint8_t *)out->p, (utf8proc_ssize_t)out->n, &r, opt);
            if (rl < 0)
                return rc_errorf(rl == UTF8PROC_ERROR_NOMEM ? RC_ERR_NOMEM : RC_ERR_FORMAT,
                                 "%s: text cannot be normalised: %s", t->path, utf8proc_errmsg(rl));
            if (rl > room) {
                free(r);
                return too_large(t, "normalizers", (int64_t)len, c->grow_max);
            }
            ok = sb_add(&nb, (const char *)r, (size_t)rl);
            free(r);
            break;
        }
        case N_PREPEND:
            if (out->n > 0 && (int64_t)(out->n + strlen(s->a)) > room)
                ok = -1;
            else if (out->n > 0)
                ok = sb_add(&nb, s->a, strlen(s->a)) && sb_add(&nb, out->p, out->n);
            else
                ok = sb_add(&nb, "", 0);
            break;
        case N_REPLACE:
            ok = replace_all(out->p, out->n, s->a, s->b, &nb, room);
            break;
        }
        if (ok != 1) {
            free(nb.p);
            return ok < 0 ? too_large(t, "normalizers", (int64_t)len, c->grow_max)
                          : rc_errorf(RC_ERR_NOMEM, "out of memory");
        }
        free(out->p);
        *out = nb;
    }
    c->norm_used += (int64_t)out->n;
    return RC_OK;
}

/* one match attempt with the given per-position limit; a JIT stack overflow
 * is retried with the interpreter (heap frames, depth and heap limits) */
static int re_try(const pre_step *st, const char *s, size_t n, size_t off, uint32_t opts, pcre2_match_data *md,
                  pcre2_match_context *mc, uint32_t limit)
{
    pcre2_set_match_limit(mc, limit);
    /* the text was validated once up front; PCRE2 would re-check the whole subject per call */
    int rc = pcre2_match(st->re, (PCRE2_SPTR)s, n, off, opts | PCRE2_NO_UTF_CHECK, md, mc);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(st->re, (PCRE2_SPTR)s, n, off, opts | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, mc);
    return rc;
}

static rc_status re_error(const enc_ctx *c, const pre_step *st, int rc, size_t at, size_t n)
{
    const char *why = NULL;
    if (rc == PCRE2_ERROR_MATCHLIMIT)
        why = "needs more backtracking than ratiocheck allows (1000 steps per start position, retries paid from "
              "10^7 + 1000 steps per byte of text)";
    else if (rc == PCRE2_ERROR_DEPTHLIMIT)
        why = "backtracks deeper than ratiocheck allows (depth 10^6)";
    else if (rc == PCRE2_ERROR_HEAPLIMIT)
        why = "needs more backtracking memory than ratiocheck allows (256 MiB)";
    if (why)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: pre-tokenizer regex /%.60s/ %s, at byte %zu of a %zu-byte piece of text",
                         c->t->path, st->pattern, why, at, n);
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return rc_errorf(rc == PCRE2_ERROR_NOMEMORY ? RC_ERR_NOMEM : RC_ERR_UNSUPPORTED,
                     "%s: pre-tokenizer regex /%.60s/ failed at byte %zu of a %zu-byte piece of text: %s", c->t->path,
                     st->pattern, at, n, (char *)msg);
}

/* The next match at or after off: *found, [*ms, *me). First an ordinary
 * search with RE_STEP_LIMIT steps per start position; when some position
 * needs more, the positions from off on are tried one by one (anchored), a
 * position that needs more getting 4x the limit, paid from c->re_budget.
 * (Anchored tries differ from one search only for \G and the backtracking
 * verbs (*COMMIT) / (*SKIP), which tokenizer patterns do not use.) */
static rc_status re_find(enc_ctx *c, const pre_step *st, const char *s, size_t n, size_t off, pcre2_match_data *md,
                         bool *found, size_t *ms, size_t *me)
{
    *found = false;
    int rc = re_try(st, s, n, off, 0, md, c->mc, RE_STEP_LIMIT);
    for (size_t p = off; rc == PCRE2_ERROR_MATCHLIMIT;) {
        uint32_t lim = RE_STEP_LIMIT;
        for (;;) {
            rc = re_try(st, s, n, p, PCRE2_ANCHORED, md, c->mc, lim);
            if (rc != PCRE2_ERROR_MATCHLIMIT)
                break;
            uint32_t next = lim > UINT32_MAX / 4 ? UINT32_MAX : lim * 4;
            if ((int64_t)next > c->re_budget)
                return re_error(c, st, PCRE2_ERROR_MATCHLIMIT, p, n);
            c->re_budget -= next;
            lim = next;
        }
        if (rc != PCRE2_ERROR_NOMATCH || p >= n)
            break;
        p += (size_t)u8len((unsigned char)s[p]);
        if (p > n)
            p = n;
        rc = PCRE2_ERROR_MATCHLIMIT; /* try the next position */
    }
    if (rc == PCRE2_ERROR_NOMATCH)
        return RC_OK;
    if (rc < 0)
        return re_error(c, st, rc, off, n);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    if (ov[0] > ov[1] || ov[1] > n || ov[0] < off) /* \K in a lookaround can do this */
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: pre-tokenizer regex /%.60s/ gives a match that ends before it starts",
                         c->t->path, st->pattern);
    *found = true;
    *ms = ov[0];
    *me = ov[1];
    return RC_OK;
}

/* split s by the regex into pieces according to behaviour */
static rc_status regex_split(enc_ctx *c, const pre_step *st, const char *s, size_t n, split_behavior beh, bool invert,
                             plist *out)
{
    int64_t add;
    if (!rc_mul_i64((int64_t)n, RE_BUDGET_PER_BYTE, &add) || !rc_add_i64(c->re_budget, add, &c->re_budget))
        c->re_budget = INT64_MAX / 2;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(st->re, NULL);
    if (!md)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    /* collect [start, end, is_match] segments covering s */
    size_t off = 0, prev = 0;
    bool ok = true;
    rc_status rs = RC_OK;
    char *pending = NULL; /* MergedWithNext: a delimiter waiting for its right side */
    size_t pend_n = 0;
    sbuf acc = {0};
    /* MergedWithPrevious (as HF's split): a delimiter joins the piece before
     * it from this text, unless that piece is a delimiter too */
    const size_t base = out->n;
    bool prev_delim = false;
    while (ok && off <= n) {
        bool found;
        size_t ms = n, me = n;
        rs = re_find(c, st, s, n, off, md, &found, &ms, &me);
        if (rs != RC_OK)
            break;
        if (!found) {
            ms = me = n;
        } else if (me == ms) { /* empty match: step over one character */
            if (ms >= n) {
                ms = me = n;
                found = false;
            } else {
                off = ms + (size_t)u8len((unsigned char)s[ms]);
                continue;
            }
        }
        /* gap [prev, ms) then match [ms, me) */
        const char *gs = s + prev, *mp = s + ms;
        size_t gl = ms - prev, ml = me - ms;
        bool gap_is_delim = invert, match_is_delim = !invert;
        for (int part = 0; part < 2 && ok; part++) {
            const char *ps = part == 0 ? gs : mp;
            size_t pn = part == 0 ? gl : ml;
            bool delim = part == 0 ? gap_is_delim : match_is_delim;
            if (pn == 0)
                continue;
            if (!delim) {
                if (beh == B_MERGED_NEXT && pending) {
                    acc.n = 0;
                    ok = sb_add(&acc, pending, pend_n) && sb_add(&acc, ps, pn) && pl_push(out, acc.p, acc.n);
                    free(pending);
                    pending = NULL;
                } else {
                    ok = pl_push(out, ps, pn);
                }
            } else if (beh == B_ISOLATED) {
                ok = pl_push(out, ps, pn);
            } else if (beh == B_MERGED_PREV) {
                if (out->n > base && !prev_delim) {
                    piece *last = &out->v[out->n - 1];
                    char *q = realloc(last->s, last->n + pn + 1);
                    ok = q != NULL;
                    if (ok) {
                        memcpy(q + last->n, ps, pn);
                        last->n += pn;
                        q[last->n] = '\0';
                        last->s = q;
                    }
                } else {
                    ok = pl_push(out, ps, pn);
                }
            } else if (beh == B_MERGED_NEXT) {
                if (pending) { /* two delimiters in a row */
                    ok = pl_push(out, pending, pend_n);
                    free(pending);
                    pending = NULL;
                }
                pending = malloc(pn);
                ok = ok && pending;
                if (ok) {
                    memcpy(pending, ps, pn);
                    pend_n = pn;
                }
            } /* B_REMOVED: dropped */
            prev_delim = delim;
        }
        if (!found)
            break;
        prev = me;
        off = me;
    }
    if (pending) {
        ok = ok && pl_push(out, pending, pend_n);
        free(pending);
    }
    free(acc.p);
    pcre2_match_data_free(md);
    if (rs == RC_OK && !ok)
        rs = rc_errorf(RC_ERR_NOMEM, "out of memory in pre-tokenization");
    return rs;
}

int64_t pl_bytes(const plist *l)
{
    int64_t b = 0;
    for (size_t i = 0; i < l->n; i++)
        b += (int64_t)l->v[i].n;
    return b;
}

static rc_status pretokenize(enc_ctx *c, const char *text, size_t n, bool at_start, plist *out)
{
    const rc_tokenizer *t = c->t;
    plist cur = {0};
    if (!pl_push(&cur, text, n))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    rc_status rs = RC_OK;
    for (int si = 0; si < t->n_pres && rs == RC_OK; si++) {
        const pre_step *s = &t->pres[si];
        plist nxt = {0};
        bool ok = true;
        for (size_t i = 0; i < cur.n && ok && rs == RC_OK; i++) {
            const char *ps = cur.v[i].s;
            size_t pn = cur.v[i].n;
            if (s->kind == P_BYTELEVEL) {
                sbuf pre = {0};
                if (s->add_prefix_space && ps[0] != ' ')
                    ok = sb_add(&pre, " ", 1);
                ok = ok && sb_add(&pre, ps, pn);
                plist parts = {0};
                if (ok) {
                    if (s->use_regex)
                        rs = regex_split(c, s, pre.p, pre.n, B_ISOLATED, false, &parts);
                    else
                        ok = pl_push(&parts, pre.p, pre.n);
                }
                for (size_t j = 0; j < parts.n && ok && rs == RC_OK; j++) {
                    sbuf enc = {0};
                    ok = sb_reserve(&enc, 2 * parts.v[j].n);
                    for (size_t k = 0; k < parts.v[j].n && ok; k++) {
                        unsigned char b = (unsigned char)parts.v[j].s[k];
                        ok = sb_add(&enc, t->bl_enc[b], (size_t)t->bl_len[b]);
                    }
                    ok = ok && pl_push(&nxt, enc.p, enc.n);
                    free(enc.p);
                }
                pl_free(&parts);
                free(pre.p);
            } else if (s->kind == P_SPLIT) {
                rs = regex_split(c, s, ps, pn, s->behavior, s->invert, &nxt);
            } else { /* Metaspace */
                /* spaces become the replacement first; then it is prepended
                 * unless the piece already starts with it */
                sbuf r = {0};
                bool prepend = s->prepend == 2 || (s->prepend == 1 && at_start && i == 0);
                size_t rl = strlen(s->repl);
                sbuf rep = {0};
                ok = replace_all(ps, pn, " ", s->repl, &rep, INT64_MAX) == 1; /* one character: at most 4x */
                if (ok && prepend && rep.n > 0 && !(rep.n >= rl && memcmp(rep.p, s->repl, rl) == 0))
                    ok = sb_add(&r, s->repl, rl);
                ok = ok && sb_add(&r, rep.p, rep.n);
                free(rep.p);
                if (ok && s->split) {
                    /* split before every replacement (MergedWithNext) */
                    size_t st = 0;
                    for (size_t k = 1; k + rl <= r.n && ok; k++)
                        if (memcmp(r.p + k, s->repl, rl) == 0) {
                            ok = pl_push(&nxt, r.p + st, k - st);
                            st = k;
                        }
                    ok = ok && pl_push(&nxt, r.p + st, r.n - st);
                } else if (ok) {
                    ok = pl_push(&nxt, r.p, r.n);
                }
                free(r.p);
            }
        }
        pl_free(&cur);
        cur = nxt;
        if (rs == RC_OK && !ok)
            rs = rc_errorf(RC_ERR_NOMEM, "out of memory in pre-tokenization");
        if (rs == RC_OK && pl_bytes(&cur) > c->grow_max - c->pre_used)
            rs = too_large(t, "pre-tokenizers", (int64_t)n, c->grow_max);
    }
    if (rs != RC_OK) {
        pl_free(&cur);
        return rs;
    }
    c->pre_used += pl_bytes(&cur);
    *out = cur;
    return RC_OK;
}

typedef struct {
    int32_t id, prev, next, len;
} sym;

typedef struct {
    int32_t rank, pos, new_id;
} cand;

static bool cand_less(const cand *a, const cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(cand *h, int64_t *n, cand c)
{
    int64_t i = (*n)++;
    h[i] = c;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!cand_less(&h[i], &h[p]))
            break;
        cand tmp = h[i];
        h[i] = h[p];
        h[p] = tmp;
        i = p;
    }
}

static cand heap_pop(cand *h, int64_t *n)
{
    cand top = h[0];
    h[0] = h[--(*n)];
    int64_t i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && cand_less(&h[l], &h[m]))
            m = l;
        if (r < *n && cand_less(&h[r], &h[m]))
            m = r;
        if (m == i)
            break;
        cand tmp = h[i];
        h[i] = h[m];
        h[m] = tmp;
        i = m;
    }
    return top;
}

typedef struct {
    int32_t *v;
    int64_t n, cap;
} ivec;

static bool iv_push(ivec *a, int32_t x)
{
    if (a->n == a->cap) {
        int64_t c = a->cap ? 2 * a->cap : 64;
        int32_t *q = realloc(a->v, (size_t)c * sizeof *q);
        if (!q)
            return false;
        a->v = q;
        a->cap = c;
    }
    a->v[a->n++] = x;
    return true;
}

static rc_status bpe_word(const rc_tokenizer *t, const char *w, size_t n, ivec *out)
{
    if (t->ignore_merges) {
        int32_t id = sm_get(&t->vocab, w, n);
        if (id >= 0)
            return iv_push(out, id) ? RC_OK : rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    if (n > (size_t)INT32_MAX / 4) /* symbol positions are int32 */
        return rc_errorf(RC_ERR_NOMEM, "%s: a pre-tokenized word of %zu bytes is too long", t->path, n);
    sym *s = malloc((n * 4 + 1) * sizeof *s);
    cand *h = malloc((n * 4 + 8) * sizeof *h);
    if (!s || !h) {
        free(s);
        free(h);
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        int l = u8len((unsigned char)w[i]);
        if ((size_t)l > n - i) /* never read past the word */
            l = (int)(n - i);
        int32_t id = sm_get(&t->vocab, w + i, (size_t)l);
        if (id >= 0) {
            s[ns] = (sym){id, ns - 1, ns + 1, l};
            ns++;
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (int k = 0; k < l; k++)
                    all = all && t->byte_ids[(unsigned char)w[i + k]] >= 0;
                if (all) {
                    for (int k = 0; k < l; k++) {
                        s[ns] = (sym){t->byte_ids[(unsigned char)w[i + k]], ns - 1, ns + 1, 1};
                        ns++;
                    }
                    done = true;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (t->fuse_unk && ns > 0 && s[ns - 1].id == t->unk_id)
                    s[ns - 1].len += l;
                else {
                    s[ns] = (sym){t->unk_id, ns - 1, ns + 1, l};
                    ns++;
                }
            }
        }
        i += (size_t)l;
    }
    if (ns > 0)
        s[ns - 1].next = -1;
    int64_t hn = 0;
    for (int32_t i = 0; i + 1 < ns; i++) {
        int32_t rank, nid;
        if (pm_get(&t->merges, s[i].id, s[i + 1].id, &rank, &nid))
            heap_push(h, &hn, (cand){rank, i, nid});
    }
    while (hn > 0) {
        cand c = heap_pop(h, &hn);
        sym *a = &s[c.pos];
        if (a->len == 0 || a->next < 0)
            continue;
        sym *b = &s[a->next];
        int32_t rank, nid;
        if (!pm_get(&t->merges, a->id, b->id, &rank, &nid) || nid != c.new_id)
            continue;
        a->id = nid;
        a->len += b->len;
        a->next = b->next;
        b->len = 0;
        if (a->next >= 0)
            s[a->next].prev = c.pos;
        if (a->prev >= 0 && pm_get(&t->merges, s[a->prev].id, a->id, &rank, &nid))
            heap_push(h, &hn, (cand){rank, a->prev, nid});
        if (a->next >= 0 && pm_get(&t->merges, a->id, s[a->next].id, &rank, &nid))
            heap_push(h, &hn, (cand){rank, c.pos, nid});
    }
    rc_status st = RC_OK;
    for (int32_t i = 0; i < ns && st == RC_OK; i = s[i].next < 0 ? ns : s[i].next)
        if (s[i].len > 0 && !iv_push(out, s[i].id))
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
    free(s);
    free(h);
    return st;
}

static bool is_word_byte(unsigned char c) { return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); }
static bool is_space_byte(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* longest added token starting at i; returns its index or -1 */
static int match_added(const rc_tokenizer *t, const char *s, size_t n, size_t i)
{
    int best = -1;
    const unsigned char b = (unsigned char)s[i];
    for (int j = t->add_start[b]; j < t->add_start[b + 1]; j++) { /* only tokens starting with s[i] */
        const int k = t->add_order[j];
        const added_token *a = &t->added[k];
        if (a->len > n - i || memcmp(s + i, a->content, a->len) != 0)
            continue;
        if (a->single_word && ((i > 0 && is_word_byte((unsigned char)s[i - 1])) ||
                               (i + a->len < n && is_word_byte((unsigned char)s[i + a->len]))))
            continue;
        if (best < 0 || a->len > t->added[best].len)
            best = k;
    }
    return best;
}

static rc_status encode_text(enc_ctx *c, const char *s, size_t n, bool at_start, ivec *out)
{
    if (n == 0)
        return RC_OK;
    sbuf norm = {0};
    rc_status st = normalize(c, s, n, &norm);
    if (st != RC_OK) {
        free(norm.p);
        return st;
    }
    plist pl = {0};
    st = pretokenize(c, norm.p, norm.n, at_start, &pl);
    for (size_t i = 0; i < pl.n && st == RC_OK; i++)
        st = bpe_word(c->t, pl.v[i].s, pl.v[i].n, out);
    pl_free(&pl);
    free(norm.p);
    return st;
}

rc_status rc_tokenizer_encode(const rc_tokenizer *t, const char *text, size_t len, bool add_special,
                              int32_t **ids, int64_t *n)
{
    *ids = NULL;
    *n = 0;
    size_t bad;
    if (!rc_utf8_valid((const unsigned char *)text, len, &bad))
        return rc_errorf(RC_ERR_FORMAT, "text is not valid UTF-8 at byte %zu", bad);
    enc_ctx c = {.t = t, .grow_max = grow_limit((int64_t)len), .re_budget = RE_BUDGET_BASE};
    if (!(c.mc = pcre2_match_context_create(NULL)))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    pcre2_set_depth_limit(c.mc, RE_DEPTH_LIMIT);
    pcre2_set_heap_limit(c.mc, RE_HEAP_LIMIT_KIB);
    ivec out = {0};
    rc_status st = RC_OK;
    for (int i = 0; i < (add_special ? t->n_prefix : 0) && st == RC_OK; i++)
        if (!iv_push(&out, t->prefix_ids[i]))
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
    /* split on added tokens: [seg_start, i) is plain text */
    size_t seg = 0, i = 0;
    while (i < len && st == RC_OK) {
        int k = t->n_added ? match_added(t, text, len, i) : -1;
        if (k < 0) {
            i += (size_t)u8len((unsigned char)text[i]);
            continue;
        }
        const added_token *a = &t->added[k];
        size_t ms = i, me = i + a->len;
        if (a->lstrip)
            while (ms > seg && is_space_byte((unsigned char)text[ms - 1]))
                ms--;
        if (a->rstrip)
            while (me < len && is_space_byte((unsigned char)text[me]))
                me++;
        st = encode_text(&c, text + seg, ms - seg, seg == 0, &out);
        if (st == RC_OK && !iv_push(&out, a->id))
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
        seg = i = me;
    }
    if (st == RC_OK)
        st = encode_text(&c, text + seg, len - seg, seg == 0, &out);
    for (int j = 0; j < (add_special ? t->n_suffix : 0) && st == RC_OK; j++)
        if (!iv_push(&out, t->suffix_ids[j]))
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
    pcre2_match_context_free(c.mc);
    if (st != RC_OK) {
        free(out.v);
        return st;
    }
    if (!out.v && !(out.v = malloc(sizeof(int32_t))))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    *ids = out.v;
    *n = out.n;
    return RC_OK;
}

