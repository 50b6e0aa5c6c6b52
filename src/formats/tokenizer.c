/* tokenizer.json (HF `tokenizers`) in C.
 *
 * Supported, matching tokenizers 0.23's behaviour:
 *   normalizers     null, NFC, NFD, NFKC, NFKD (utf8proc), Prepend, Replace
 *                   (String pattern), Sequence
 *   pre-tokenizers  null, ByteLevel (GPT-2 regex, byte-to-unicode map), Split
 *                   (Regex via PCRE2 with UTF + UCP, or String; Isolated,
 *                   Removed, MergedWithPrevious, MergedWithNext; invert),
 *                   Metaspace (prepend_scheme always / first / never, split),
 *                   Sequence
 *   model           BPE: merges as "a b" strings or ["a", "b"] pairs, lowest
 *                   rank first and leftmost on ties (a heap over a linked list
 *                   of symbols), ignore_merges, byte_fallback <0xNN>, unk and
 *                   fuse_unk
 *   added tokens    matched longest-leftmost on the raw text before
 *                   normalisation, lstrip / rstrip / single_word
 *   post-processors null, ByteLevel, TemplateProcessing (single), Roberta,
 *                   Bert, Sequence
 *   decoders        ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip,
 *                   Sequence
 * Anything else is rejected by name at load. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "json_util.h"
#include "util.h"

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

static bool sb_add(sbuf *b, const char *s, size_t n)
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

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static bool sm_init(strmap *m, size_t n)
{
    m->cap = 16;
    while (m->cap < 2 * n + 1)
        m->cap *= 2;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->lens = calloc(m->cap, sizeof *m->lens);
    m->vals = calloc(m->cap, sizeof *m->vals);
    return m->keys && m->lens && m->vals;
}

static int32_t sm_get(const strmap *m, const char *s, size_t n)
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
static void sm_put(strmap *m, char *s, size_t n, int32_t v)
{
    size_t i = fnv(s, n) & (m->cap - 1);
    while (m->keys[i] && !(m->lens[i] == n && memcmp(m->keys[i], s, n) == 0))
        i = (i + 1) & (m->cap - 1);
    m->keys[i] = s;
    m->lens[i] = n;
    m->vals[i] = v;
}

static void sm_free(strmap *m)
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

static bool pm_init(pairmap *m, size_t n)
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

static bool pm_get(const pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id)
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

static void pm_put(pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id)
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

static const char *k_gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static void bytelevel_tables(rc_tokenizer *t)
{
    int n = 0;
    for (int i = 0; i < 512; i++)
        t->bl_dec[i] = -1;
    for (int b = 0; b < 256; b++) {
        int cp;
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
            cp = b;
        else
            cp = 256 + n++;
        t->bl_dec[cp] = (int16_t)b;
        if (cp < 0x80) {
            t->bl_enc[b][0] = (char)cp;
            t->bl_len[b] = 1;
        } else {
            t->bl_enc[b][0] = (char)(0xC0 | (cp >> 6));
            t->bl_enc[b][1] = (char)(0x80 | (cp & 0x3F));
            t->bl_len[b] = 2;
        }
    }
}

/* length of the UTF-8 sequence starting at s (valid input assumed) */
static int u8len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

static int32_t u8decode(const unsigned char *s, int *n)
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

static rc_status compile_re(const char *path, const char *pattern, bool literal, pcre2_code **out, char **text)
{
    if (!(*text = strdup(pattern)))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    int err;
    PCRE2_SIZE off;
    /* PCRE2_LITERAL refuses PCRE2_UCP (which only matters for \d, \w, ...) */
    uint32_t flags = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    *out = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, flags, &err, &off, NULL);
    if (!*out) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: regex /%.60s/ does not compile at offset %zu: %s", path, pattern,
                         (size_t)off, (char *)msg);
    }
    pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE); /* optional speed-up */
    return RC_OK;
}

void rc_tokenizer_free(rc_tokenizer *t)
{
    if (!t)
        return;
    for (int64_t i = 0; i < t->n_pieces; i++)
        free(t->piece[i]);
    free(t->piece);
    free(t->piece_len);
    free(t->special);
    sm_free(&t->vocab);
    free(t->merges.keys);
    free(t->merges.rank);
    free(t->merges.id);
    for (int i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    free(t->add_order);
    for (int i = 0; i < t->n_norms; i++) {
        free(t->norms[i].a);
        free(t->norms[i].b);
    }
    for (int i = 0; i < t->n_pres; i++) {
        pcre2_code_free(t->pres[i].re);
        free(t->pres[i].pattern);
        free(t->pres[i].repl);
    }
    for (int i = 0; i < t->n_decs; i++) {
        free(t->decs[i].a);
        free(t->decs[i].b);
    }
    free(t->chat_template);
    free(t->chat_template_path);
    free(t->chat_config_path);
    free(t->chat_bos);
    free(t->chat_eos);
    free(t->chat_error);
    free(t->path);
    free(t);
}

const char *rc_tokenizer_piece(const rc_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_pieces ? t->piece[id] : NULL;
}

int64_t rc_tokenizer_vocab_size(const rc_tokenizer *t) { return t->n_pieces; }

int32_t rc_tokenizer_added_id(const rc_tokenizer *t, const char *s, size_t n, bool *special)
{
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].content, s, n) == 0) {
            if (special)
                *special = t->added[i].special;
            return t->added[i].id;
        }
    if (special)
        *special = false;
    return -1;
}

const rc_tokenizer_chat *rc_tokenizer_chat_info(const rc_tokenizer *t) { return &t->chat; }

/* ---- the chat template's files (tokenizer.h) ------------------------------ */

#define CHAT_MAX_TEMPLATE ((size_t)1 << 20)   /* chat_template.jinja, bytes */
#define CHAT_MAX_CONFIG ((size_t)64 << 20)    /* tokenizer_config.json / special_tokens_map.json */

/* remember the first problem; the load goes on */
static void chat_problem(rc_tokenizer *t, rc_status s)
{
    if (t->chat.status != RC_OK)
        return;
    t->chat.status = s;
    t->chat_error = strdup(rc_last_error());
    t->chat.error = t->chat_error ? t->chat_error : "out of memory";
}

/* present: the path exists (of any kind); a stat error other than "absent" is a problem */
static bool chat_present(rc_tokenizer *t, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return true;
    if (errno != ENOENT && errno != ENOTDIR)
        chat_problem(t, rc_errorf(RC_ERR_IO, "%s: %s", path, strerror(errno)));
    return false;
}

/* a special token's string as transformers keeps it: "..." or {"content": "..."};
 * *out NULL when absent or null; false when it is neither */
static bool chat_token(const json_t *v, const char **out)
{
    *out = NULL;
    if (!v || json_is_null(v))
        return true;
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!json_is_string(v))
        return false;
    *out = json_string_value(v);
    return true;
}

static char *chat_dup(rc_tokenizer *t, const char *s)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        chat_problem(t, rc_errorf(RC_ERR_NOMEM, "out of memory"));
    return d;
}

static void load_chat_info(rc_tokenizer *t, const char *path)
{
    json_t *root = NULL;
    rc_status s;
    t->chat.status = RC_OK;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + (slash == path)) : strdup(".");
    char *cfg = dir ? rc_path_join(dir, "tokenizer_config.json") : NULL;
    char *jinja = dir ? rc_path_join(dir, "chat_template.jinja") : NULL;
    char *smap = dir ? rc_path_join(dir, "special_tokens_map.json") : NULL;
    char *extra = dir ? rc_path_join(dir, "additional_chat_templates") : NULL;
    if (!cfg || !jinja || !smap || !extra) {
        chat_problem(t, rc_errorf(RC_ERR_NOMEM, "out of memory"));
        goto done;
    }
    t->chat_config_path = cfg;
    t->chat.config_path = cfg;
    cfg = NULL;
    if (chat_present(t, t->chat_config_path)) {
        if ((s = rc_json_load_object(t->chat_config_path, CHAT_MAX_CONFIG, &root)) != RC_OK) {
            chat_problem(t, s);
            root = NULL;
        }
    }
    if (root) {
        const json_t *ct = json_object_get(root, "chat_template");
        const char *bos, *eos;
        if (json_is_array(ct)) { /* [{"name": ..., "template": ...}]: transformers uses "default" */
            const json_t *def = NULL;
            for (size_t i = 0; i < json_array_size(ct); i++) {
                const json_t *e = json_array_get(ct, i), *nm = json_object_get(e, "name");
                if (json_is_string(nm) && strcmp(json_string_value(nm), "default") == 0)
                    def = json_object_get(e, "template");
            }
            if (!def)
                chat_problem(t, rc_errorf(RC_ERR_UNSUPPORTED,
                                          "%s: \"chat_template\" is a list without a template named \"default\"",
                                          t->chat_config_path));
            ct = def;
        }
        if (ct && !json_is_null(ct) && !json_is_string(ct))
            chat_problem(t, rc_errorf(RC_ERR_FORMAT, "%s: \"chat_template\" is not a string", t->chat_config_path));
        else if (json_is_string(ct) && t->chat.status == RC_OK) {
            t->chat_template = malloc(json_string_length(ct) + 1);
            if (!t->chat_template) {
                chat_problem(t, rc_errorf(RC_ERR_NOMEM, "out of memory"));
            } else {
                memcpy(t->chat_template, json_string_value(ct), json_string_length(ct) + 1);
                t->chat.template_len = json_string_length(ct);
                t->chat_template_path = chat_dup(t, t->chat_config_path);
            }
        }
        if (!chat_token(json_object_get(root, "bos_token"), &bos) ||
            !chat_token(json_object_get(root, "eos_token"), &eos)) {
            chat_problem(t, rc_errorf(RC_ERR_FORMAT, "%s: \"bos_token\" / \"eos_token\" is not a string or "
                                                     "{\"content\": \"...\"}", t->chat_config_path));
        } else {
            t->chat_bos = chat_dup(t, bos);
            t->chat_eos = chat_dup(t, eos);
        }
        json_decref(root);
    }
    /* chat_template.jinja replaces the config's template (transformers 5 saves it so) */
    if (chat_present(t, jinja)) {
        char *buf;
        size_t len;
        if ((s = rc_read_file(jinja, &buf, &len, CHAT_MAX_TEMPLATE)) != RC_OK) {
            chat_problem(t, s);
        } else {
            free(t->chat_template);
            free(t->chat_template_path);
            t->chat_template = buf;
            t->chat.template_len = len;
            t->chat_template_path = jinja;
            jinja = NULL;
        }
    } else if (chat_present(t, extra)) {
        /* transformers then loads the folder's templates as named ones, without a "default" */
        chat_problem(t, rc_errorf(RC_ERR_UNSUPPORTED, "%s: named chat templates without chat_template.jinja are "
                                                      "not read", extra));
    }
    /* a legacy special_tokens_map.json may set bos_token instead */
    if (chat_present(t, smap)) {
        json_t *m = NULL;
        const char *bos = NULL;
        if (rc_json_load_object(smap, CHAT_MAX_CONFIG, &m) != RC_OK || !chat_token(json_object_get(m, "bos_token"), &bos) ||
            (bos && (!t->chat_bos || strcmp(bos, t->chat_bos) != 0)))
            t->chat.bos_uncertain = true;
        json_decref(m);
        rc_clear_error();
    }
done:
    t->chat.template_text = t->chat_template;
    t->chat.template_path = t->chat_template_path;
    t->chat.bos_token = t->chat_bos;
    t->chat.eos_token = t->chat_eos;
    rc_clear_error(); /* the problems are kept in t->chat */
    free(dir);
    free(cfg);
    free(jinja);
    free(smap);
    free(extra);
}

static const char *type_of(const json_t *o)
{
    const json_t *ty = json_object_get(o, "type");
    return json_is_string(ty) ? json_string_value(ty) : "";
}

/* a JSON string as a C string; NULL when absent, not a string, with a NUL
 * inside (it would be cut short) or out of memory */
static char *dupstr(const json_t *v)
{
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        return NULL;
    return strdup(json_string_value(v));
}

/* Metaspace's replacement is one character in HF (a Rust char) */
static rc_status metaspace_repl(const rc_tokenizer *t, const json_t *o, const char *what, char **out)
{
    const json_t *r = json_object_get(o, "replacement");
    if (!r) {
        *out = strdup("\xe2\x96\x81");
        return *out ? RC_OK : rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    const char *v = json_string_value(r);
    if (!v || json_string_length(r) == 0 || strlen(v) != json_string_length(r) ||
        (size_t)u8len((unsigned char)v[0]) != json_string_length(r))
        return rc_errorf(RC_ERR_FORMAT, "%s: Metaspace %s: \"replacement\" must be one character", t->path, what);
    *out = strdup(v);
    return *out ? RC_OK : rc_errorf(RC_ERR_NOMEM, "out of memory");
}

/* ---- loading ------------------------------------------------------------- */

static rc_status add_piece(rc_tokenizer *t, const char *s, size_t n, int64_t id, int64_t limit, bool from_added)
{
    const char *path = t->path;
    if (id < 0 || id > INT32_MAX)
        return rc_errorf(RC_ERR_FORMAT, "%s: token \"%.40s\" has invalid id %lld", path, s, (long long)id);
    if (limit > 0 && id >= limit)
        return rc_errorf(RC_ERR_FORMAT, "%s: token \"%.40s\" has id %lld, not below the model's %lld embedding rows",
                         path, s, (long long)id, (long long)limit);
    if (memchr(s, '\0', n))
        return rc_errorf(RC_ERR_FORMAT, "%s: token with id %lld contains a NUL byte", path, (long long)id);
    size_t bad;
    if (!rc_utf8_valid((const unsigned char *)s, n, &bad))
        return rc_errorf(RC_ERR_FORMAT, "%s: token with id %lld is not valid UTF-8", path, (long long)id);
    if (id >= t->n_pieces)
        return rc_errorf(RC_ERR_INTERNAL, "piece table too small");
    if (t->piece[id]) {
        if (from_added && t->piece_len[id] == n && memcmp(t->piece[id], s, n) == 0)
            return RC_OK; /* an added token repeating its vocab entry */
        return rc_errorf(RC_ERR_FORMAT, "%s: id %lld is used by both \"%.40s\" and \"%.40s\"", path, (long long)id,
                         t->piece[id], s);
    }
    int32_t other = sm_get(&t->vocab, s, n);
    if (other >= 0 && other != id)
        return rc_errorf(RC_ERR_FORMAT, "%s: token \"%.40s\" appears with ids %d and %lld", path, s, other,
                         (long long)id);
    t->piece[id] = malloc(n + 1);
    if (!t->piece[id])
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    memcpy(t->piece[id], s, n);
    t->piece[id][n] = '\0';
    t->piece_len[id] = n;
    sm_put(&t->vocab, t->piece[id], n, (int32_t)id);
    return RC_OK;
}

static rc_status load_normalizer(rc_tokenizer *t, const json_t *n)
{
    if (!n || json_is_null(n))
        return RC_OK;
    const char *ty = type_of(n);
    if (!strcmp(ty, "Sequence")) {
        const json_t *arr = json_object_get(n, "normalizers");
        size_t i;
        const json_t *e;
        json_array_foreach(arr, i, e) RC_TRY(load_normalizer(t, e));
        return RC_OK;
    }
    if (t->n_norms == MAX_STEPS)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: too many normalizer steps", t->path);
    norm_step *s = &t->norms[t->n_norms++]; /* counted now: freed even if filling fails */
    memset(s, 0, sizeof *s);
    if (!strcmp(ty, "NFC"))
        s->kind = N_NFC;
    else if (!strcmp(ty, "NFD"))
        s->kind = N_NFD;
    else if (!strcmp(ty, "NFKC"))
        s->kind = N_NFKC;
    else if (!strcmp(ty, "NFKD"))
        s->kind = N_NFKD;
    else if (!strcmp(ty, "Prepend")) {
        s->kind = N_PREPEND;
        s->a = dupstr(json_object_get(n, "prepend"));
        if (!s->a)
            return rc_errorf(RC_ERR_FORMAT, "%s: Prepend normalizer without \"prepend\"", t->path);
    } else if (!strcmp(ty, "Replace")) {
        s->kind = N_REPLACE;
        const json_t *pat = json_object_get(n, "pattern");
        s->a = dupstr(json_object_get(pat, "String"));
        s->b = dupstr(json_object_get(n, "content"));
        if (!s->a || !s->b)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: Replace normalizer: only String patterns are supported",
                             t->path);
    } else {
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: normalizer \"%.40s\" is not supported", t->path, ty);
    }
    return RC_OK;
}

static rc_status load_pretok(rc_tokenizer *t, const json_t *p)
{
    if (!p || json_is_null(p))
        return RC_OK;
    const char *ty = type_of(p);
    if (!strcmp(ty, "Sequence")) {
        const json_t *arr = json_object_get(p, "pretokenizers");
        size_t i;
        const json_t *e;
        json_array_foreach(arr, i, e) RC_TRY(load_pretok(t, e));
        return RC_OK;
    }
    if (t->n_pres == MAX_STEPS)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: too many pre-tokenizer steps", t->path);
    pre_step *s = &t->pres[t->n_pres++]; /* counted now: freed even if filling fails */
    memset(s, 0, sizeof *s);
    if (!strcmp(ty, "ByteLevel")) {
        s->kind = P_BYTELEVEL;
        s->add_prefix_space = json_is_true(json_object_get(p, "add_prefix_space"));
        const json_t *ur = json_object_get(p, "use_regex");
        s->use_regex = ur ? json_is_true(ur) : true;
        if (s->use_regex)
            RC_TRY(compile_re(t->path, k_gpt2_pattern, false, &s->re, &s->pattern));
    } else if (!strcmp(ty, "Split")) {
        s->kind = P_SPLIT;
        const json_t *pat = json_object_get(p, "pattern");
        const json_t *rx = json_object_get(pat, "Regex"), *st = json_object_get(pat, "String");
        if ((json_is_string(rx) && strlen(json_string_value(rx)) != json_string_length(rx)) ||
            (json_is_string(st) && strlen(json_string_value(st)) != json_string_length(st)))
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: Split pattern with a NUL character", t->path);
        if (json_is_string(rx))
            RC_TRY(compile_re(t->path, json_string_value(rx), false, &s->re, &s->pattern));
        else if (json_is_string(st))
            RC_TRY(compile_re(t->path, json_string_value(st), true, &s->re, &s->pattern));
        else
            return rc_errorf(RC_ERR_FORMAT, "%s: Split pre-tokenizer without a pattern", t->path);
        const char *b = json_string_value(json_object_get(p, "behavior"));
        b = b ? b : "";
        if (!strcmp(b, "Removed"))
            s->behavior = B_REMOVED;
        else if (!strcmp(b, "Isolated"))
            s->behavior = B_ISOLATED;
        else if (!strcmp(b, "MergedWithPrevious"))
            s->behavior = B_MERGED_PREV;
        else if (!strcmp(b, "MergedWithNext"))
            s->behavior = B_MERGED_NEXT;
        else
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: Split behavior \"%.30s\" is not supported", t->path, b);
        s->invert = json_is_true(json_object_get(p, "invert"));
    } else if (!strcmp(ty, "Metaspace")) {
        s->kind = P_METASPACE;
        RC_TRY(metaspace_repl(t, p, "pre-tokenizer", &s->repl));
        const char *ps = json_string_value(json_object_get(p, "prepend_scheme"));
        if (ps)
            s->prepend = !strcmp(ps, "always") ? 2 : !strcmp(ps, "first") ? 1 : 0;
        else
            s->prepend = json_is_false(json_object_get(p, "add_prefix_space")) ? 0 : 2;
        const json_t *sp = json_object_get(p, "split");
        s->split = sp ? json_is_true(sp) : true;
    } else {
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: pre-tokenizer \"%.40s\" is not supported", t->path, ty);
    }
    return RC_OK;
}

static rc_status load_decoder(rc_tokenizer *t, const json_t *d)
{
    if (!d || json_is_null(d))
        return RC_OK;
    const char *ty = type_of(d);
    if (!strcmp(ty, "Sequence")) {
        const json_t *arr = json_object_get(d, "decoders");
        size_t i;
        const json_t *e;
        json_array_foreach(arr, i, e) RC_TRY(load_decoder(t, e));
        return RC_OK;
    }
    if (t->n_decs == MAX_STEPS)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: too many decoder steps", t->path);
    dec_step *s = &t->decs[t->n_decs++]; /* counted now: freed even if filling fails */
    memset(s, 0, sizeof *s);
    if (!strcmp(ty, "ByteLevel"))
        s->kind = D_BYTELEVEL;
    else if (!strcmp(ty, "ByteFallback"))
        s->kind = D_BYTEFALLBACK;
    else if (!strcmp(ty, "Fuse"))
        s->kind = D_FUSE;
    else if (!strcmp(ty, "Metaspace")) {
        s->kind = D_METASPACE;
        RC_TRY(metaspace_repl(t, d, "decoder", &s->a));
        const char *ps = json_string_value(json_object_get(d, "prepend_scheme"));
        s->prepend = ps ? (!strcmp(ps, "always") ? 2 : !strcmp(ps, "first") ? 1 : 0)
                        : (json_is_false(json_object_get(d, "add_prefix_space")) ? 0 : 2);
    } else if (!strcmp(ty, "Replace")) {
        s->kind = D_REPLACE;
        s->a = dupstr(json_object_get(json_object_get(d, "pattern"), "String"));
        s->b = dupstr(json_object_get(d, "content"));
        if (!s->a || !s->b)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: Replace decoder: only String patterns are supported", t->path);
    } else if (!strcmp(ty, "Strip")) {
        s->kind = D_STRIP;
        s->a = dupstr(json_object_get(d, "content"));
        if (!s->a)
            return rc_errorf(RC_ERR_FORMAT, "%s: Strip decoder without \"content\"", t->path);
        const json_t *a = json_object_get(d, "start"), *b = json_object_get(d, "stop");
        if ((a && !json_is_integer(a)) || (b && !json_is_integer(b)) || json_integer_value(a) < 0 ||
            json_integer_value(b) < 0)
            return rc_errorf(RC_ERR_FORMAT, "%s: Strip decoder: \"start\" and \"stop\" must be counts", t->path);
        /* more strips than a token has bytes change nothing */
        s->start = json_integer_value(a) > INT32_MAX ? INT32_MAX : (int)json_integer_value(a);
        s->stop = json_integer_value(b) > INT32_MAX ? INT32_MAX : (int)json_integer_value(b);
    } else {
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: decoder \"%.40s\" is not supported", t->path, ty);
    }
    return RC_OK;
}

/* append one post-processor id, bounded by the table */
static rc_status push_special(rc_tokenizer *t, const json_t *v, const char *ty, int32_t *dst, int *n)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        return rc_errorf(RC_ERR_FORMAT, "%s: %s: special token id %s%lld is not a token id", t->path, ty,
                         json_is_integer(v) ? "" : "(not an integer) ", (long long)json_integer_value(v));
    if (*n == MAX_SPECIALS)
        return rc_errorf(RC_ERR_FORMAT, "%s: the post-processors add more than %d special tokens before or after the text",
                         t->path, MAX_SPECIALS);
    dst[(*n)++] = (int32_t)json_integer_value(v);
    return RC_OK;
}

static rc_status special_ids(rc_tokenizer *t, const json_t *specials, const char *name, int32_t *dst, int *n)
{
    const json_t *sp = json_object_get(specials, name);
    const json_t *ids = json_object_get(sp, "ids");
    if (!json_is_array(ids))
        return rc_errorf(RC_ERR_FORMAT, "%s: post-processor special token \"%.40s\" is not defined", t->path, name);
    size_t i;
    const json_t *e;
    json_array_foreach(ids, i, e) RC_TRY(push_special(t, e, "TemplateProcessing", dst, n));
    return RC_OK;
}

static rc_status load_post(rc_tokenizer *t, const json_t *p)
{
    if (!p || json_is_null(p))
        return RC_OK;
    const char *ty = type_of(p);
    if (!strcmp(ty, "Sequence")) {
        const json_t *arr = json_object_get(p, "processors");
        size_t i;
        const json_t *e;
        json_array_foreach(arr, i, e) RC_TRY(load_post(t, e));
        return RC_OK;
    }
    if (!strcmp(ty, "ByteLevel"))
        return RC_OK; /* offsets only */
    if (!strcmp(ty, "TemplateProcessing")) {
        const json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
        bool seen_seq = false;
        size_t i;
        const json_t *e;
        json_array_foreach(single, i, e)
        {
            const json_t *st = json_object_get(e, "SpecialToken");
            if (st) {
                const char *id = json_string_value(json_object_get(st, "id"));
                if (!id)
                    return rc_errorf(RC_ERR_FORMAT, "%s: TemplateProcessing special token without id", t->path);
                RC_TRY(special_ids(t, specials, id, seen_seq ? t->suffix_ids : t->prefix_ids,
                                   seen_seq ? &t->n_suffix : &t->n_prefix));
            } else if (json_object_get(e, "Sequence")) {
                seen_seq = true;
            } else {
                return rc_errorf(RC_ERR_FORMAT, "%s: TemplateProcessing piece is neither SpecialToken nor Sequence",
                                 t->path);
            }
        }
        return RC_OK;
    }
    if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        const json_t *cls = json_object_get(p, "cls"), *sep = json_object_get(p, "sep");
        if (!json_is_integer(json_array_get(cls, 1)) || !json_is_integer(json_array_get(sep, 1)))
            return rc_errorf(RC_ERR_FORMAT, "%s: %s without cls / sep", t->path, ty);
        RC_TRY(push_special(t, json_array_get(cls, 1), ty, t->prefix_ids, &t->n_prefix));
        return push_special(t, json_array_get(sep, 1), ty, t->suffix_ids, &t->n_suffix);
    }
    return rc_errorf(RC_ERR_UNSUPPORTED, "%s: post-processor \"%.40s\" is not supported", t->path, ty);
}

static rc_status load_model(rc_tokenizer *t, const json_t *m, const json_t *added, int64_t limit)
{
    const char *path = t->path;
    if (!json_is_object(m))
        return rc_errorf(RC_ERR_FORMAT, "%s: \"model\" is missing", path);
    const char *ty = type_of(m);
    if (ty[0] ? strcmp(ty, "BPE") != 0 : json_object_get(m, "merges") == NULL)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: model type \"%.30s\" is not supported (only BPE)", path,
                         ty[0] ? ty : "?");
    const json_t *drop = json_object_get(m, "dropout");
    if (drop && !json_is_null(drop) && json_number_value(drop) != 0.0)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: BPE dropout is not supported (encoding must be deterministic)",
                         path);
    const json_t *csp = json_object_get(m, "continuing_subword_prefix"), *eow = json_object_get(m, "end_of_word_suffix");
    if ((json_is_string(csp) && json_string_length(csp) > 0) || (json_is_string(eow) && json_string_length(eow) > 0))
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: continuing_subword_prefix / end_of_word_suffix are not supported",
                         path);
    const json_t *vocab = json_object_get(m, "vocab");
    const json_t *merges = json_object_get(m, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return rc_errorf(RC_ERR_FORMAT, "%s: BPE model needs \"vocab\" (object) and \"merges\" (array)", path);
    t->byte_fallback = json_is_true(json_object_get(m, "byte_fallback"));
    t->fuse_unk = json_is_true(json_object_get(m, "fuse_unk"));
    t->ignore_merges = json_is_true(json_object_get(m, "ignore_merges"));
    /* id table size: max id over vocab and added tokens */
    int64_t max_id = -1;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)vocab, k, v)
    {
        if (!json_is_integer(v))
            return rc_errorf(RC_ERR_FORMAT, "%s: vocab entry \"%.40s\" is not an integer id", path, k);
        if (json_integer_value(v) > max_id)
            max_id = json_integer_value(v);
    }
    size_t i;
    const json_t *e;
    json_array_foreach(added, i, e)
    {
        const json_t *id = json_object_get(e, "id");
        if (!json_is_integer(id) || !json_is_string(json_object_get(e, "content")))
            return rc_errorf(RC_ERR_FORMAT, "%s: added_tokens[%zu] needs \"id\" and \"content\"", path, i);
        if (json_integer_value(id) > max_id)
            max_id = json_integer_value(id);
    }
    if (max_id > (1 << 24))
        return rc_errorf(RC_ERR_FORMAT, "%s: token id %lld is too large", path, (long long)max_id);
    /* ids at or above the limit are load errors (add_piece names them): no table for them */
    t->n_pieces = limit > 0 && max_id >= limit ? limit : max_id + 1;
    t->piece = calloc((size_t)t->n_pieces + 1, sizeof *t->piece);
    t->piece_len = calloc((size_t)t->n_pieces + 1, sizeof *t->piece_len);
    t->special = calloc((size_t)t->n_pieces + 1, 1);
    /* the hash table is sized by the entries, not by the largest id */
    if (!t->piece || !t->piece_len || !t->special ||
        !sm_init(&t->vocab, json_object_size(vocab) + json_array_size(added) + 1))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    json_object_foreach((json_t *)vocab, k, v)
        RC_TRY(add_piece(t, k, strlen(k), json_integer_value(v), limit, false));
    /* merges: "a b" strings (legacy) or ["a", "b"] pairs; rank = position */
    if (!pm_init(&t->merges, json_array_size(merges) + 1))
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    json_array_foreach(merges, i, e)
    {
        const char *a, *b;
        size_t la, lb;
        char *tmp = NULL;
        if (json_is_string(e)) {
            const char *sv = json_string_value(e);
            if (!strncmp(sv, "#version", 8))
                continue;
            const char *sp = strchr(sv, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return rc_errorf(RC_ERR_FORMAT, "%s: merge %zu \"%.40s\" is not two tokens separated by one space",
                                 path, i, sv);
            a = sv;
            la = (size_t)(sp - sv);
            b = sp + 1;
            lb = strlen(b);
        } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
            la = strlen(a);
            lb = strlen(b);
        } else {
            return rc_errorf(RC_ERR_FORMAT, "%s: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", path, i);
        }
        int32_t ia = sm_get(&t->vocab, a, la), ib = sm_get(&t->vocab, b, lb);
        tmp = malloc(la + lb + 1);
        if (!tmp)
            return rc_errorf(RC_ERR_NOMEM, "out of memory");
        memcpy(tmp, a, la);
        memcpy(tmp + la, b, lb);
        int32_t inew = sm_get(&t->vocab, tmp, la + lb);
        if (ia < 0 || ib < 0 || inew < 0) {
            rc_status st = rc_errorf(RC_ERR_FORMAT, "%s: merge %zu names a token not in the vocabulary: \"%.*s\"",
                                     path, i, (int)(ia < 0 ? (la > 40 ? 40 : la) : ib < 0 ? (lb > 40 ? 40 : lb)
                                                                                        : (la + lb > 40 ? 40 : la + lb)),
                                     ia < 0 ? a : ib < 0 ? b : tmp);
            free(tmp);
            return st;
        }
        free(tmp);
        pm_put(&t->merges, ia, ib, (int32_t)i, inew);
    }
    /* unk and byte fallback */
    t->unk_id = -1;
    const json_t *unk = json_object_get(m, "unk_token");
    if (json_is_string(unk)) {
        t->unk_id = sm_get(&t->vocab, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0)
            return rc_errorf(RC_ERR_FORMAT, "%s: unk_token \"%.40s\" is not in the vocabulary", path,
                             json_string_value(unk));
    }
    for (int b = 0; b < 256; b++) {
        char nm[8];
        snprintf(nm, sizeof nm, "<0x%02X>", b);
        t->byte_ids[b] = sm_get(&t->vocab, nm, 6);
    }
    return RC_OK;
}

static rc_status load_added(rc_tokenizer *t, const json_t *added, int64_t limit)
{
    size_t n = json_array_size(added), i;
    const json_t *e;
    t->added = calloc(n + 1, sizeof *t->added);
    if (!t->added)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    json_array_foreach(added, i, e)
    {
        const json_t *c = json_object_get(e, "content");
        added_token *a = &t->added[t->n_added];
        a->len = json_string_length(c);
        if (a->len == 0)
            return rc_errorf(RC_ERR_FORMAT, "%s: added_tokens[%zu] is empty", t->path, i);
        RC_TRY(add_piece(t, json_string_value(c), a->len, json_integer_value(json_object_get(e, "id")), limit, true));
        a->content = strdup(json_string_value(c));
        if (!a->content)
            return rc_errorf(RC_ERR_NOMEM, "out of memory");
        a->id = (int32_t)json_integer_value(json_object_get(e, "id"));
        a->special = json_is_true(json_object_get(e, "special"));
        if (a->special)
            t->special[a->id] = 1;
        a->lstrip = json_is_true(json_object_get(e, "lstrip"));
        a->rstrip = json_is_true(json_object_get(e, "rstrip"));
        a->single_word = json_is_true(json_object_get(e, "single_word"));
        t->n_added++;
    }
    /* group by first byte, so matching at a position looks only at tokens that can start there */
    t->add_order = malloc(((size_t)t->n_added + 1) * sizeof *t->add_order);
    if (!t->add_order)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    int count[257] = {0};
    for (int k = 0; k < t->n_added; k++)
        count[(unsigned char)t->added[k].content[0] + 1]++;
    for (int b = 0; b < 256; b++)
        count[b + 1] += count[b];
    memcpy(t->add_start, count, sizeof count);
    for (int k = 0; k < t->n_added; k++)
        t->add_order[count[(unsigned char)t->added[k].content[0]]++] = k;
    return RC_OK;
}

rc_status rc_tokenizer_load(const char *path, int64_t vocab_limit, rc_tokenizer **out)
{
    *out = NULL;
    json_t *root;
    RC_TRY(rc_json_load_object(path, 512u << 20, &root));
    rc_tokenizer *t = calloc(1, sizeof *t);
    rc_status s = RC_OK;
    if (!t || !(t->path = strdup(path))) {
        free(t);
        json_decref(root);
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    bytelevel_tables(t);
    const json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added))
        s = rc_errorf(RC_ERR_FORMAT, "%s: \"added_tokens\" is not an array", path);
    if (s == RC_OK)
        s = load_model(t, json_object_get(root, "model"), added, vocab_limit);
    if (s == RC_OK)
        s = load_added(t, added, vocab_limit);
    if (s == RC_OK)
        s = load_normalizer(t, json_object_get(root, "normalizer"));
    if (s == RC_OK)
        s = load_pretok(t, json_object_get(root, "pre_tokenizer"));
    if (s == RC_OK)
        s = load_post(t, json_object_get(root, "post_processor"));
    if (s == RC_OK)
        s = load_decoder(t, json_object_get(root, "decoder"));
    if (s == RC_OK)
        load_chat_info(t, path); /* never fails the load (tokenizer.h) */
    for (int i = 0; s == RC_OK && i < t->n_prefix + t->n_suffix; i++) {
        int32_t id = i < t->n_prefix ? t->prefix_ids[i] : t->suffix_ids[i - t->n_prefix];
        if (!rc_tokenizer_piece(t, id))
            s = rc_errorf(RC_ERR_FORMAT, "%s: post-processor uses id %d, which is not a token", path, id);
    }
    json_decref(root);
    if (s != RC_OK) {
        rc_tokenizer_free(t);
        return s;
    }
    *out = t;
    return RC_OK;
}

/* ---- encoding ------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t n;
} piece;

typedef struct {
    piece *v;
    size_t n, cap;
} plist;

static bool pl_push(plist *l, const char *s, size_t n)
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

static void pl_free(plist *l)
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

static int64_t grow_limit(int64_t in)
{
    int64_t g;
    if (!rc_mul_i64(in, GROW_K, &g) || !rc_add_i64(g, GROW_C, &g))
        return INT64_MAX;
    return g;
}

static rc_status too_large(const rc_tokenizer *t, const char *stage, int64_t in, int64_t max)
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
static int replace_all(const char *s, size_t n, const char *pat, const char *rep, sbuf *out, int64_t max)
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

static int64_t pl_bytes(const plist *l)
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

/* ---- decoding ------------------------------------------------------------- */

/* append bytes as UTF-8, replacing invalid sequences with U+FFFD (like
 * Rust's String::from_utf8_lossy) */
static bool add_lossy(sbuf *o, const unsigned char *b, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t bad;
        if (rc_utf8_valid(b + i, n - i, &bad))
            return sb_add(o, (const char *)b + i, n - i);
        if (!sb_add(o, (const char *)b + i, bad))
            return false;
        i += bad;
        /* skip the maximal invalid prefix (at least one byte) */
        size_t skip = 1;
        unsigned char c = b[i];
        int want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        while (skip < (size_t)want && i + skip < n && (b[i + skip] & 0xC0) == 0x80 &&
               !rc_utf8_valid(b + i, skip + 1, NULL))
            skip++;
        if (!sb_add(o, "\xef\xbf\xbd", 3))
            return false;
        i += skip;
    }
    return true;
}

rc_status rc_tokenizer_decode(const rc_tokenizer *t, const int32_t *ids, int64_t n, bool skip_special,
                              char **out, size_t *len)
{
    *out = NULL;
    plist toks = {0};
    rc_status st = RC_OK;
    if (n < 0)
        return rc_errorf(RC_ERR_INTERNAL, "decode: negative count");
    for (int64_t i = 0; i < n && st == RC_OK; i++) {
        const char *p = rc_tokenizer_piece(t, ids[i]);
        if (!p) /* like HF's decode: ids without a token (padded embedding rows, e.g. pythia's 50277..50303) are skipped */
            continue;
        if (skip_special && t->special[ids[i]])
            continue;
        if (!pl_push(&toks, p, t->piece_len[ids[i]]) && t->piece_len[ids[i]] > 0)
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
    }
    const int64_t in_bytes = pl_bytes(&toks), grow_max = grow_limit(in_bytes);
    for (int d = 0; d < t->n_decs && st == RC_OK; d++) {
        const dec_step *s = &t->decs[d];
        plist nxt = {0};
        bool ok = true, grown = false;
        if (s->kind == D_BYTELEVEL || s->kind == D_FUSE) {
            sbuf all = {0};
            ok = sb_add(&all, "", 0);
            for (size_t i = 0; i < toks.n && ok; i++) {
                if (s->kind == D_FUSE) {
                    ok = sb_add(&all, toks.v[i].s, toks.v[i].n);
                    continue;
                }
                /* every char must be in the byte map, else the token's own bytes */
                sbuf bytes = {0};
                bool mapped = true;
                for (size_t k = 0; k < toks.v[i].n && ok;) {
                    int l;
                    int32_t cp = u8decode((const unsigned char *)toks.v[i].s + k, &l);
                    if (cp < 512 && t->bl_dec[cp] >= 0) {
                        char b = (char)t->bl_dec[cp];
                        ok = sb_add(&bytes, &b, 1);
                    } else {
                        mapped = false;
                        break;
                    }
                    k += (size_t)l;
                }
                ok = ok && (mapped ? sb_add(&all, bytes.p ? bytes.p : "", bytes.n) : sb_add(&all, toks.v[i].s, toks.v[i].n));
                free(bytes.p);
            }
            if (ok && s->kind == D_BYTELEVEL) {
                sbuf lossy = {0};
                ok = sb_add(&lossy, "", 0) && add_lossy(&lossy, (const unsigned char *)all.p, all.n);
                ok = ok && pl_push(&nxt, lossy.p, lossy.n);
                free(lossy.p);
            } else if (ok) {
                ok = pl_push(&nxt, all.p, all.n);
            }
            free(all.p);
        } else if (s->kind == D_BYTEFALLBACK) {
            sbuf bytes = {0};
            int nb = 0;
            for (size_t i = 0; i <= toks.n && ok; i++) {
                unsigned int b;
                bool is_byte = i < toks.n && toks.v[i].n == 6 && sscanf(toks.v[i].s, "<0x%2X>", &b) == 1 &&
                               toks.v[i].s[5] == '>';
                if (is_byte) {
                    char c = (char)b;
                    ok = sb_add(&bytes, &c, 1);
                    nb++;
                    continue;
                }
                if (nb > 0) { /* flush: valid UTF-8 as one string, else one U+FFFD per byte */
                    if (rc_utf8_valid((const unsigned char *)bytes.p, bytes.n, NULL))
                        ok = pl_push(&nxt, bytes.p, bytes.n);
                    else
                        for (int k = 0; k < nb && ok; k++)
                            ok = pl_push(&nxt, "\xef\xbf\xbd", 3);
                    bytes.n = 0;
                    nb = 0;
                }
                if (i < toks.n)
                    ok = ok && pl_push(&nxt, toks.v[i].s, toks.v[i].n);
            }
            free(bytes.p);
        } else if (s->kind == D_REPLACE || s->kind == D_METASPACE) {
            int64_t made = 0;
            for (size_t i = 0; i < toks.n && ok; i++) {
                sbuf r = {0};
                int rr = replace_all(toks.v[i].s, toks.v[i].n, s->a, s->kind == D_REPLACE ? s->b : " ", &r,
                                     grow_max - made);
                if (rr < 0) {
                    free(r.p);
                    grown = true;
                    break;
                }
                ok = rr == 1;
                made += (int64_t)r.n;
                size_t st0 = 0;
                if (ok && s->kind == D_METASPACE && i == 0 && s->prepend != 0 && r.n > 0 && r.p[0] == ' ')
                    st0 = 1;
                ok = ok && pl_push(&nxt, r.p + st0, r.n - st0);
                free(r.p);
            }
        } else { /* D_STRIP: per token, up to start / stop copies of content */
            size_t cl = strlen(s->a);
            for (size_t i = 0; i < toks.n && ok; i++) {
                size_t b = 0, e = toks.v[i].n;
                if (cl == 0) { /* stripping "" changes nothing (and would loop start times) */
                    ok = pl_push(&nxt, toks.v[i].s, e);
                    continue;
                }
                for (int k = 0; k < s->start && b + cl <= e && memcmp(toks.v[i].s + b, s->a, cl) == 0; k++)
                    b += cl;
                for (int k = 0; k < s->stop && e >= b + cl && memcmp(toks.v[i].s + e - cl, s->a, cl) == 0; k++)
                    e -= cl;
                ok = pl_push(&nxt, toks.v[i].s + b, e - b);
            }
        }
        pl_free(&toks);
        toks = nxt;
        if (!ok)
            st = rc_errorf(RC_ERR_NOMEM, "out of memory in decoding");
        else if (grown || pl_bytes(&toks) > grow_max)
            st = too_large(t, "decoders", in_bytes, grow_max);
    }
    sbuf res = {0};
    if (st == RC_OK && !sb_add(&res, "", 0))
        st = rc_errorf(RC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < toks.n && st == RC_OK; i++)
        if (!sb_add(&res, toks.v[i].s, toks.v[i].n))
            st = rc_errorf(RC_ERR_NOMEM, "out of memory");
    pl_free(&toks);
    if (st != RC_OK) {
        free(res.p);
        return st;
    }
    *out = res.p;
    if (len)
        *len = res.n;
    return RC_OK;
}
