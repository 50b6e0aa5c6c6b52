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
#include "tokenizer_impl.h"
#include "util.h"

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
        /* integers as reals: transformers writes model_max_length = int(1e30) when a
         * model sets none, past jansson's 64-bit integers; no integer is read from it */
        if ((s = rc_json_load_object_flags(t->chat_config_path, CHAT_MAX_CONFIG, JSON_DECODE_INT_AS_REAL, &root)) !=
            RC_OK) {
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
        if (rc_json_load_object_flags(smap, CHAT_MAX_CONFIG, JSON_DECODE_INT_AS_REAL, &m) != RC_OK || !chat_token(json_object_get(m, "bos_token"), &bos) ||
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

