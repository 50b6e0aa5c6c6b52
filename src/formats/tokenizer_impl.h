/* tokenizer.c's and tokenizer_encode.c's shared parts: the tokenizer's
 * structure, its hash tables and string buffer, the resource bounds.
 * Internal to src/formats/. */
#ifndef RC_TOKENIZER_IMPL_H
#define RC_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#define MAX_STEPS 16
#define MAX_SPECIALS 8 /* post-processor ids before / after the text */

/* Resource bounds (README, Tokenizer). Text that normalizers, pre-tokenizers
 * or decoders produce is at most GROW_K x the input + GROW_C bytes in total,
 * per encode / decode call. */
#define GROW_K 32
#define GROW_C ((int64_t)64 << 10)
/* PCRE2 counts its match limit per start position (JIT and interpreter
 * alike), so a search over n positions may do n x limit steps. Each start
 * position gets RE_STEP_LIMIT steps; a position that needs more is retried
 * alone with 4x the limit, paid from a budget of RE_BUDGET_BASE +
 * RE_BUDGET_PER_BYTE x every byte a regex scans in one encode call. Total
 * regex work is therefore linear in the text. */
#define RE_STEP_LIMIT 1000u
#define RE_BUDGET_BASE ((int64_t)10000000)
#define RE_BUDGET_PER_BYTE ((int64_t)1000)
#define RE_DEPTH_LIMIT 1000000u          /* backtracking depth (interpreter) */
#define RE_HEAP_LIMIT_KIB (256u << 10)   /* backtracking memory: 256 MiB */

/* ---- small string buffer ---------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static inline bool sb_add(sbuf *b, const char *s, size_t n)
{
    if (n > ((size_t)1 << 48) || b->n > ((size_t)1 << 48)) /* never near overflow (callers bound sizes far lower) */
        return false;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 64;
        while (c < b->n + n + 1)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q)
            return false;
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

/* ---- string -> id hash table -------------------------------------------- */

typedef struct {
    char **keys;
    size_t *lens;
    int32_t *vals;
    size_t cap;
} strmap;

static inline uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static inline bool sm_init(strmap *m, size_t n)
{
    m->cap = 16;
    while (m->cap < 2 * n + 1)
        m->cap *= 2;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->lens = calloc(m->cap, sizeof *m->lens);
    m->vals = calloc(m->cap, sizeof *m->vals);
    return m->keys && m->lens && m->vals;
}

static inline int32_t sm_get(const strmap *m, const char *s, size_t n)
{
    if (!m->cap)
        return -1;
    for (size_t i = fnv(s, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i])
            return -1;
        if (m->lens[i] == n && memcmp(m->keys[i], s, n) == 0)
            return m->vals[i];
    }
}

/* key is borrowed (owned by the tokenizer's piece table) */
static inline void sm_put(strmap *m, char *s, size_t n, int32_t v)
{
    size_t i = fnv(s, n) & (m->cap - 1);
    while (m->keys[i] && !(m->lens[i] == n && memcmp(m->keys[i], s, n) == 0))
        i = (i + 1) & (m->cap - 1);
    m->keys[i] = s;
    m->lens[i] = n;
    m->vals[i] = v;
}

static inline void sm_free(strmap *m)
{
    free(m->keys);
    free(m->lens);
    free(m->vals);
}

/* ---- merges: (a, b) -> (rank, new id) ----------------------------------- */

typedef struct {
    uint64_t *keys; /* (a << 32 | b) + 1, 0 = empty */
    int32_t *rank, *id;
    size_t cap;
} pairmap;

static inline bool pm_init(pairmap *m, size_t n)
{
    m->cap = 16;
    while (m->cap < 2 * n + 1)
        m->cap *= 2;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->rank = calloc(m->cap, sizeof *m->rank);
    m->id = calloc(m->cap, sizeof *m->id);
    return m->keys && m->rank && m->id;
}

static inline uint64_t pkey(int32_t a, int32_t b) { return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1; }

static inline bool pm_get(const pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id)
{
    if (!m->cap)
        return false;
    uint64_t k = pkey(a, b);
    for (size_t i = (k * 0x9e3779b97f4a7c15ull) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i])
            return false;
        if (m->keys[i] == k) {
            *rank = m->rank[i];
            *id = m->id[i];
            return true;
        }
    }
}

static inline void pm_put(pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
{
    uint64_t k = pkey(a, b);
    size_t i = (k * 0x9e3779b97f4a7c15ull) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != k)
        i = (i + 1) & (m->cap - 1);
    if (m->keys[i] == k)
        return; /* first (lowest) rank wins */
    m->keys[i] = k;
    m->rank[i] = rank;
    m->id[i] = id;
}

/* ---- the tokenizer ---------------------------------------------------- */

typedef enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_PREPEND, N_REPLACE } norm_kind;
typedef struct {
    norm_kind kind;
    char *a, *b; /* Prepend: a = prefix; Replace: a = pattern, b = content */
} norm_step;

typedef enum { P_BYTELEVEL, P_SPLIT, P_METASPACE } pre_kind;
typedef enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT } split_behavior;
typedef struct {
    pre_kind kind;
    bool add_prefix_space, use_regex; /* ByteLevel */
    pcre2_code *re;                   /* ByteLevel (GPT-2 regex) or Split */
    char *pattern;                    /* its text, for messages */
    split_behavior behavior;
    bool invert;
    char *repl;    /* Metaspace replacement */
    int prepend;   /* 0 never, 1 first, 2 always */
    bool split;
} pre_step;

typedef enum { D_BYTELEVEL, D_METASPACE, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP } dec_kind;
typedef struct {
    dec_kind kind;
    char *a, *b; /* Replace: pattern, content; Metaspace: replacement */
    int prepend; /* Metaspace */
    int start, stop; /* Strip */
} dec_step;

typedef struct {
    char *content;
    size_t len;
    int32_t id;
    bool special, lstrip, rstrip, single_word;
} added_token;

struct rc_tokenizer {
    char *path;
    int64_t n_pieces;  /* id table size */
    char **piece;      /* [n_pieces] id -> string (NULL for holes) */
    size_t *piece_len;
    strmap vocab;      /* model vocab + added tokens */
    pairmap merges;
    bool byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    int32_t byte_ids[256]; /* <0xNN> ids for byte fallback, -1 if absent */
    added_token *added;
    int n_added;
    int *add_order;      /* added-token indices grouped by first byte, ascending within a group */
    int add_start[257];  /* group of byte b: add_order[add_start[b] .. add_start[b + 1]) */
    norm_step norms[MAX_STEPS];
    int n_norms;
    pre_step pres[MAX_STEPS];
    int n_pres;
    dec_step decs[MAX_STEPS];
    int n_decs;
    uint8_t *special;  /* [n_pieces] 1 for special added tokens */
    int32_t prefix_ids[MAX_SPECIALS], suffix_ids[MAX_SPECIALS]; /* post-processor specials */
    int n_prefix, n_suffix;
    /* tokenizer_config.json / chat_template.jinja (tokenizer.h) */
    rc_tokenizer_chat chat;
    char *chat_template, *chat_template_path, *chat_config_path, *chat_bos, *chat_eos, *chat_error;
    /* byte-level map */
    char bl_enc[256][3];
    int bl_len[256];
    int16_t bl_dec[512]; /* code point (< 512) -> byte, -1 */
};

static inline int u8len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

static inline int32_t u8decode(const unsigned char *s, int *n)
{
    int l = u8len(s[0]);
    *n = l;
    if (l == 1)
        return s[0];
    int32_t cp = s[0] & (0x3F >> (l - 1));
    for (int i = 1; i < l; i++)
        cp = (cp << 6) | (s[i] & 0x3F);
    return cp;
}


typedef struct {
    char *s;
    size_t n;
} piece;

typedef struct {
    piece *v;
    size_t n, cap;
} plist;

/* tokenizer_encode.c: what decoding shares with it */
bool pl_push(plist *l, const char *s, size_t n);
void pl_free(plist *l);
int64_t pl_bytes(const plist *l);
int64_t grow_limit(int64_t in);
int replace_all(const char *s, size_t n, const char *pat, const char *rep, sbuf *out, int64_t max);
rc_status too_large(const rc_tokenizer *t, const char *stage, int64_t in, int64_t max);

#endif
