/* Shared helpers for the libFuzzer harnesses in tools/fuzz/ (see README.md).
 *
 * - scratch folders on tmpfs, whole-file writes
 * - an optional check that library error messages are one line and name the
 *   input (FUZZ_CHECK_MSG=1 aborts otherwise)
 * - a JSON-aware custom mutator: parse the input with jansson, change one value
 *   (interesting integers / reals / strings, delete or add a key, change a
 *   type), print it back. Inputs that do not parse fall back to libFuzzer's
 *   byte-level mutations, so malformed JSON is still explored.
 */
#ifndef RC_FUZZ_COMMON_H
#define RC_FUZZ_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* A fresh folder under /dev/shm (or $TMPDIR, or /tmp); never removed, so that
 * a crashing input can be inspected. */
static inline const char *fz_scratch_dir(const char *tag)
{
    static char dir[512];
    const char *base = getenv("FUZZ_TMP");
    if (!base)
        base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/rcfuzz-%s-XXXXXX", base, tag);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        abort();
    }
    return dir;
}

static inline void fz_write(const char *path, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(path);
        abort();
    }
    size_t o = 0;
    while (o < size) {
        ssize_t w = write(fd, data + o, size - o);
        if (w <= 0) {
            perror("write");
            abort();
        }
        o += (size_t)w;
    }
    close(fd);
}

static inline void fz_copy(const char *from, const char *to)
{
    FILE *f = fopen(from, "rb");
    if (!f) {
        perror(from);
        abort();
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n)
        abort();
    fclose(f);
    fz_write(to, b, (size_t)n);
    free(b);
}

/* With FUZZ_CHECK_MSG=1: the last error must be one line (no control
 * characters) and mention `must_name` (the file or folder given).
 * FUZZ_CHECK_MSG=2 checks only the name. */
static inline void fz_check_msg(rc_status s, const char *must_name)
{
    static int on = -1;
    if (on < 0)
        on = getenv("FUZZ_CHECK_MSG") ? atoi(getenv("FUZZ_CHECK_MSG")) : 0;
    if (!on || s == RC_OK)
        return;
    const char *m = rc_last_error();
    for (const char *c = m; on == 1 && *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            fprintf(stderr, "error message has control byte 0x%02x at %zu: %s\n", (unsigned char)*c,
                    (size_t)(c - m), m);
            abort();
        }
    if (must_name && !strstr(m, must_name)) {
        fprintf(stderr, "error message does not name %s: %s\n", must_name, m);
        abort();
    }
}

/* fz_check_msg where either of two files may be the one at fault (a quantized
 * checkpoint's error names its config.json or the safetensors file) */
static inline void fz_check_msg2(rc_status s, const char *name_a, const char *name_b)
{
    fz_check_msg(s, NULL);
    if (s == RC_OK || !getenv("FUZZ_CHECK_MSG") || !atoi(getenv("FUZZ_CHECK_MSG")))
        return;
    const char *m = rc_last_error();
    if (!strstr(m, name_a) && !strstr(m, name_b)) {
        fprintf(stderr, "error message names neither %s nor %s: %s\n", name_a, name_b, m);
        abort();
    }
}

/* ------------------------------------------------------------------------ */
/* JSON-aware mutation                                                       */

typedef struct {
    const char *const *keys;    /* keys worth adding */
    const char *const *strings; /* string values worth trying */
} fz_json_dict;

static inline uint64_t fz_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline size_t fz_count(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

static inline json_t *fz_interesting(uint64_t *r, const fz_json_dict *d)
{
    static const long long ints[] = {0,
                                     1,
                                     -1,
                                     2,
                                     3,
                                     4,
                                     7,
                                     8,
                                     15,
                                     16,
                                     31,
                                     32,
                                     63,
                                     64,
                                     255,
                                     256,
                                     4095,
                                     4096,
                                     4097,
                                     65535,
                                     65536,
                                     (1ll << 20) - 1,
                                     1ll << 20,
                                     (1ll << 20) + 1,
                                     1ll << 22,
                                     (1ll << 22) + 1,
                                     1ll << 24,
                                     (1ll << 24) + 1,
                                     2147483647ll,
                                     2147483648ll,
                                     4294967295ll,
                                     4294967296ll,
                                     1ll << 40,
                                     1ll << 53,
                                     1ll << 62,
                                     9223372036854775807ll,
                                     -9223372036854775807ll - 1};
    static const double reals[] = {0.0,  -0.0, 0.25, 0.5,    1.0,    1.5,    2.0,   4.0,    4.5,
                                   1e-6, 1e-7, 1e-300, 1e300, 1e30, 1e31, 9.2e18, 9.3e18, -9.3e18,
                                   1.7976931348623157e308, -1.0, 0.999999, 1.000001, 10000.0};
    switch (fz_rand(r) % 10) {
    case 0:
    case 1:
    case 2:
        return json_integer(ints[fz_rand(r) % (sizeof ints / sizeof ints[0])]);
    case 3:
        return json_integer((json_int_t)(fz_rand(r) % 1000));
    case 4:
        return json_real(reals[fz_rand(r) % (sizeof reals / sizeof reals[0])]);
    case 5: {
        size_t n = fz_count(d->strings);
        if (n)
            return json_string(d->strings[fz_rand(r) % n]);
        return json_string("");
    }
    case 6:
        return fz_rand(r) % 2 ? json_true() : json_false();
    case 7:
        return json_null();
    case 8: {
        json_t *a = json_array();
        size_t n = fz_rand(r) % 4;
        for (size_t i = 0; i < n; i++)
            json_array_append_new(a, json_integer(ints[fz_rand(r) % (sizeof ints / sizeof ints[0])]));
        return a;
    }
    default:
        return json_object();
    }
}

/* Collect every value node (with its container) in pre-order. */
typedef struct {
    json_t *parent; /* object or array, NULL for the root */
    const char *key;
    size_t index;
    json_t *node;
} fz_slot;

static inline void fz_collect(json_t *parent, const char *key, size_t index, json_t *node,
                              fz_slot *slots, size_t *n, size_t cap)
{
    if (*n >= cap)
        return;
    slots[(*n)++] = (fz_slot){parent, key, index, node};
    if (json_is_object(node)) {
        const char *k;
        json_t *v;
        json_object_foreach(node, k, v) fz_collect(node, k, 0, v, slots, n, cap);
    } else if (json_is_array(node)) {
        size_t i;
        json_t *v;
        json_array_foreach(node, i, v) fz_collect(node, NULL, i, v, slots, n, cap);
    }
}

static inline void fz_set(fz_slot *s, json_t *v)
{
    if (json_is_object(s->parent))
        json_object_set_new(s->parent, s->key, v);
    else
        json_array_set_new(s->parent, s->index, v);
}

/* Mutate root in place (one to three edits). */
static inline void fz_json_edit(json_t *root, uint64_t *r, const fz_json_dict *d)
{
    int edits = 1 + (int)(fz_rand(r) % 3);
    for (int e = 0; e < edits; e++) {
        enum { CAP = 4096 };
        static fz_slot slots[CAP];
        size_t n = 0;
        fz_collect(NULL, NULL, 0, root, slots, &n, CAP);
        fz_slot *s = &slots[fz_rand(r) % n];
        unsigned op = (unsigned)(fz_rand(r) % 8);
        if (!s->parent && op < 5)
            op = 5; /* never replace the root itself */
        switch (op) {
        case 0:
        case 1: /* replace with something interesting */
            fz_set(s, fz_interesting(r, d));
            break;
        case 2: /* nudge a number */
            if (json_is_integer(s->node)) {
                json_int_t v = json_integer_value(s->node);
                static const json_int_t delta[] = {1, -1, 2, -2};
                json_int_t nv;
                if (fz_rand(r) % 3 == 0)
                    nv = fz_rand(r) % 2 ? (json_int_t)((unsigned long long)v * 2) : v / 2;
                else if (__builtin_add_overflow(v, delta[fz_rand(r) % 4], &nv))
                    nv = v;
                fz_set(s, json_integer(nv));
            } else if (json_is_real(s->node)) {
                double v = json_real_value(s->node);
                fz_set(s, json_real(fz_rand(r) % 2 ? v * 2 : -v));
            } else {
                fz_set(s, fz_interesting(r, d));
            }
            break;
        case 3: /* delete */
            if (json_is_object(s->parent))
                json_object_del(s->parent, s->key);
            else
                json_array_remove(s->parent, s->index);
            break;
        case 4: /* integer <-> real <-> string */
            if (json_is_integer(s->node))
                fz_set(s, fz_rand(r) % 2 ? json_real((double)json_integer_value(s->node))
                                         : json_sprintf("%lld", (long long)json_integer_value(s->node)));
            else if (json_is_real(s->node) && fabs(json_real_value(s->node)) < 9e18)
                fz_set(s, json_integer((json_int_t)json_real_value(s->node)));
            else
                fz_set(s, fz_interesting(r, d));
            break;
        default: { /* add a known key to some object, or append to an array */
            json_t *target = NULL;
            for (size_t tries = 0; tries < 8 && !target; tries++) {
                json_t *c = slots[fz_rand(r) % n].node;
                if (json_is_object(c) || json_is_array(c))
                    target = c;
            }
            if (!target)
                target = root;
            if (json_is_object(target)) {
                size_t nk = fz_count(d->keys);
                if (nk)
                    json_object_set_new(target, d->keys[fz_rand(r) % nk], fz_interesting(r, d));
            } else if (json_is_array(target)) {
                json_array_append_new(target, fz_interesting(r, d));
            }
            break;
        }
        }
    }
}

/* Mutate a JSON text; falls back to byte mutations when it does not parse. */
static inline size_t fz_json_mutate(uint8_t *data, size_t size, size_t max_size, unsigned seed,
                                    const fz_json_dict *d)
{
    uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
    if (fz_rand(&r) % 4 == 0)
        return LLVMFuzzerMutate(data, size, max_size);
    json_t *root = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!root)
        return LLVMFuzzerMutate(data, size, max_size);
    fz_json_edit(root, &r, d);
    char *text = json_dumps(root, (fz_rand(&r) % 2 ? JSON_COMPACT : JSON_INDENT(2)) | JSON_ENCODE_ANY);
    json_decref(root);
    if (!text)
        return LLVMFuzzerMutate(data, size, max_size);
    size_t n = strlen(text);
    if (n > max_size) {
        free(text);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    memcpy(data, text, n);
    free(text);
    return n;
}

#endif
