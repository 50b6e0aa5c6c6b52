/* Chat renderings against transformers' apply_chat_template: the references
 * of data/fixtures/chat/chat_refs.json (tools/fixtures/make_chat_fixtures.py).
 *
 * rc_test_chat_refs(tok, "smollm2", ...) renders and tokenizes every
 * conversation of the file with the template of tok's folder, through the
 * prompt loader's path (rc_chat_load, rc_chat_encode), and counts the
 * conversations whose text and ids both equal the reference of the named
 * template. For the fixture folders (tests/test_chat.c) and the real
 * SmolLM2 folder (the real-model suite: load its tokenizer.json, call this
 * with "smollm2", expect same == total == 15). A conversation the template
 * refuses (transformers' TemplateError from raise_exception) matches when
 * ratiocheck refuses it too, with RC_ERR_FORMAT and the same message.
 * strftime_now() is fixed at the time the references were made with.
 *
 * Header-only (static inline), like testutil.h. */
#ifndef RC_TEST_CHAT_REFS_H
#define RC_TEST_CHAT_REFS_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat.h"
#include "tokenizer.h"

#include "testutil.h"

/* snprintf that may cut the text (messages only) */
static inline void rc_test_chat_fmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void rc_test_chat_fmt(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* chat_refs.json (json_decref when done), or NULL with a message in why */
static inline json_t *rc_test_chat_refs_load(char *why, size_t why_n)
{
    char p[4096];
    rc_test_source_path(p, sizeof p, "data/fixtures/chat/chat_refs.json");
    json_error_t err;
    json_t *r = json_load_file(p, JSON_REJECT_DUPLICATES, &err);
    if (!r)
        rc_test_chat_fmt(why, why_n, "%s: %s", p, err.text);
    return r;
}

/* the template entry called name, or NULL */
static inline const json_t *rc_test_chat_template(const json_t *refs, const char *name)
{
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(refs, "templates"), i, t)
    {
        if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0)
            return t;
    }
    return NULL;
}

/* the time the references froze strftime_now() at ("strftime_now": ISO) */
static inline void rc_test_chat_time(const json_t *refs, struct tm *tm)
{
    memset(tm, 0, sizeof *tm);
    const char *iso = json_string_value(json_object_get(refs, "strftime_now"));
    if (iso && sscanf(iso, "%d-%d-%dT%d:%d:%d", &tm->tm_year, &tm->tm_mon, &tm->tm_mday, &tm->tm_hour, &tm->tm_min,
                      &tm->tm_sec) == 6) {
        tm->tm_year -= 1900;
        tm->tm_mon -= 1;
        tm->tm_isdst = -1;
        struct tm t = *tm;
        if (mktime(&t) != (time_t)-1) { /* the weekday and day of the year */
            tm->tm_wday = t.tm_wday;
            tm->tm_yday = t.tm_yday;
        }
    }
}

/* one conversation against its reference (text and ids, or the message the
 * template raised); kwargs: extra template arguments (NULL: none). true when
 * equal; *what says how it differs. */
static inline bool rc_test_chat_one(const rc_chat *chat, const rc_tokenizer *tok, const json_t *msgs,
                                    const json_t *kwargs, const json_t *res, char *what, size_t what_n)
{
    const json_t *want_text = json_object_get(res, "text"), *want_ids = json_object_get(res, "ids"),
                 *raised = json_object_get(res, "raised");
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    int64_t n = 0;
    rc_status st = rc_chat_render_with(chat, msgs, kwargs, &text, &len);
    bool ok;
    if (json_is_string(raised)) {
        ok = st == RC_ERR_FORMAT && strstr(rc_last_error(), json_string_value(raised)) != NULL;
        rc_test_chat_fmt(what, what_n, "transformers raises \"%s\"; ratiocheck: %s", json_string_value(raised),
                         st == RC_OK ? "renders it" : rc_last_error());
    } else if (st != RC_OK) {
        ok = false;
        rc_test_chat_fmt(what, what_n, "%s", rc_last_error());
    } else {
        ok = json_is_string(want_text) && strcmp(text, json_string_value(want_text)) == 0 &&
             rc_tokenizer_encode(tok, text, len, false, &ids, &n) == RC_OK && (int64_t)json_array_size(want_ids) == n;
        for (int64_t i = 0; ok && i < n; i++)
            ok = json_integer_value(json_array_get(want_ids, (size_t)i)) == ids[i];
        rc_test_chat_fmt(what, what_n, "text or ids differ");
    }
    free(text);
    free(ids);
    return ok;
}

/* 0 when every conversation was compared (*same of *total equal the
 * references; each one that differs is printed), -1 when the references
 * cannot be read or the template is refused (why says which). */
static inline int rc_test_chat_refs(const rc_tokenizer *tok, const char *name, int *same, int *total, char *why,
                                    size_t why_n)
{
    *same = *total = 0;
    json_t *refs = rc_test_chat_refs_load(why, why_n);
    if (!refs)
        return -1;
    int rc = 0;
    const json_t *t = rc_test_chat_template(refs, name);
    rc_chat *chat = NULL;
    if (!t) {
        rc_test_chat_fmt(why, why_n, "chat_refs.json has no template \"%s\"", name);
        rc = -1;
    } else if (rc_chat_load(tok, &chat) != RC_OK) {
        rc_test_chat_fmt(why, why_n, "%s", rc_last_error());
        rc = -1;
    }
    if (chat) {
        struct tm tm;
        rc_test_chat_time(refs, &tm);
        rc_chat_set_time(chat, &tm);
    }
    const json_t *convs = json_object_get(refs, "conversations"), *res;
    size_t k;
    json_array_foreach(rc == 0 ? json_object_get(t, "results") : NULL, k, res)
    {
        const json_t *msgs = json_object_get(json_array_get(convs, k), "messages");
        const char *cname = json_string_value(json_object_get(res, "conversation"));
        char what[1200];
        (*total)++;
        if (rc_test_chat_one(chat, tok, msgs, NULL, res, what, sizeof what))
            (*same)++;
        else
            printf("chat %s: conversation %s differs from transformers: %s\n", name, cname ? cname : "?", what);
    }
    rc_chat_free(chat);
    json_decref(refs);
    return rc;
}

#endif /* RC_TEST_CHAT_REFS_H */
