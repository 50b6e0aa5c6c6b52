#include "prompts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MAX_PROMPT_FILE (256u << 20)
#define MAX_PROMPT_TOKENS (1 << 20)

void rc_prompts_free(rc_prompts *p)
{
    free(p->tokens);
    free(p->len);
    memset(p, 0, sizeof *p);
}

rc_status rc_prompts_load_ids(const char *path, rc_prompts *out)
{
    memset(out, 0, sizeof *out);
    char *buf;
    size_t n;
    RC_TRY(rc_read_file(path, &buf, &n, MAX_PROMPT_FILE));
    if (memchr(buf, '\0', n)) {
        free(buf);
        return rc_errorf(RC_ERR_FORMAT, "%s: contains a NUL byte (expected token ids as text)", path);
    }
    /* pass 1: count prompts and the longest; pass 2: fill */
    rc_status s = RC_OK;
    for (int pass = 0; pass < 2 && s == RC_OK; pass++) {
        int64_t np = 0, line = 0;
        char *p = buf;
        while (*p && s == RC_OK) {
            line++;
            char *eol = strchr(p, '\n');
            char *next = eol ? eol + 1 : p + strlen(p);
            if (eol)
                *eol = '\0';
            char *q = p;
            while (*q == ' ' || *q == '\t' || *q == '\r')
                q++;
            if (*q != '\0' && *q != '#') {
                int64_t cnt = 0;
                while (*q) {
                    while (*q == ' ' || *q == '\t' || *q == '\r')
                        q++;
                    if (!*q)
                        break;
                    errno = 0;
                    char *end;
                    long long v = strtoll(q, &end, 10);
                    if (end == q || (*end && *end != ' ' && *end != '\t' && *end != '\r')) {
                        s = rc_errorf(RC_ERR_FORMAT, "%s:%lld:%lld: expected a token id, found '%.12s'", path,
                                      (long long)line, (long long)(q - p) + 1, q);
                        break;
                    }
                    if (errno || v < 0 || v > INT32_MAX) {
                        s = rc_errorf(RC_ERR_FORMAT, "%s:%lld:%lld: token id %.20s is out of range", path,
                                      (long long)line, (long long)(q - p) + 1, q);
                        break;
                    }
                    if (pass == 1)
                        out->tokens[np * out->max_len + cnt] = (int32_t)v;
                    if (++cnt > MAX_PROMPT_TOKENS) {
                        s = rc_errorf(RC_ERR_FORMAT, "%s:%lld: prompt longer than %d tokens", path, (long long)line,
                                      MAX_PROMPT_TOKENS);
                        break;
                    }
                    q = end;
                }
                if (s == RC_OK) {
                    if (pass == 0 && cnt > out->max_len)
                        out->max_len = cnt;
                    if (pass == 1)
                        out->len[np] = (int32_t)cnt;
                    np++;
                }
            }
            if (eol)
                *eol = '\n';
            p = next;
        }
        if (s == RC_OK && pass == 0) {
            if (np == 0) {
                s = rc_errorf(RC_ERR_FORMAT, "%s: no prompts (expected one line of token ids per prompt)", path);
                break;
            }
            out->n = np;
            s = rc_calloc((void **)&out->tokens, np * out->max_len, sizeof *out->tokens, path);
            if (s == RC_OK)
                s = rc_calloc((void **)&out->len, np, sizeof *out->len, path);
            if (s == RC_OK)
                for (int64_t i = 0; i < np * out->max_len; i++)
                    out->tokens[i] = -1;
        }
    }
    free(buf);
    if (s != RC_OK)
        rc_prompts_free(out);
    return s;
}
