#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json_util.h"
#include "quant.h"
#include "util.h"

/* Every dtype the reference reader knows, with its size in bits. Only some can
 * be loaded (rc_dtype); the rest are validated and skipped. */
static const struct {
    const char *name;
    int bits;
    int rc; /* rc_dtype or -1 */
} k_st_dtypes[] = {
    {"BOOL", 8, -1},     {"F4", 4, -1},          {"F6_E2M3", 6, -1},     {"F6_E3M2", 6, -1},
    {"U8", 8, -1},       {"I8", 8, -1},          {"F8_E5M2", 8, -1},     {"F8_E4M3", 8, -1},
    {"F8_E8M0", 8, -1},  {"F8_E4M3FNUZ", 8, -1}, {"F8_E5M2FNUZ", 8, -1}, {"I16", 16, -1},
    {"U16", 16, -1},     {"F16", 16, RC_F16},    {"BF16", 16, RC_BF16},  {"I32", 32, RC_I32},
    {"U32", 32, -1},     {"F32", 32, RC_F32},    {"C64", 64, -1},        {"F64", 64, RC_F64},
    {"I64", 64, RC_I64}, {"U64", 64, -1},
};

static int st_dtype_lookup(const char *name, int *bits)
{
    for (size_t i = 0; i < sizeof k_st_dtypes / sizeof k_st_dtypes[0]; i++)
        if (strcmp(name, k_st_dtypes[i].name) == 0) {
            *bits = k_st_dtypes[i].bits;
            return (int)i;
        }
    return -1;
}

const char *rc_st_shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
    return buf;
}

static void st_free_contents(rc_safetensors *st)
{
    for (int i = 0; i < st->nfiles; i++) {
        if (st->files[i].map && st->files[i].size)
            munmap(st->files[i].map, st->files[i].size);
        free(st->files[i].path);
    }
    free(st->files);
    for (int64_t i = 0; i < st->ntensors; i++) {
        free(st->tensors[i].name);
        free(st->tensors[i].deq);
    }
    free(st->tensors);
}

void rc_st_close(rc_safetensors *st)
{
    if (!st)
        return;
    st_free_contents(st);
    free(st);
}

static int cmp_name(const void *a, const void *b);
static rc_status st_bytes(const rc_safetensors *st, const rc_st_tensor *t, const unsigned char **p);
static void st_drop_deq(const rc_st_tensor *t);

static int cmp_begin(const void *a, const void *b)
{
    const rc_st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    /* equal begins: the shorter (possibly empty) tensor first, so that an
     * empty tensor at the same offset is contiguous, as in the reference. */
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Parse one tensor entry of the header. */
static rc_status parse_entry(const char *path, const char *name, json_t *v, rc_st_tensor *t)
{
    if (!json_is_object(v))
        return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\": entry is not a JSON object", path, name);
    json_t *jd = json_object_get(v, "dtype");
    json_t *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return rc_errorf(RC_ERR_FORMAT,
                         "%s: tensor \"%s\": needs \"dtype\" (string), \"shape\" (array) and "
                         "\"data_offsets\" (array)",
                         path, name);
    const char *dn = json_string_value(jd);
    int bits = 0;
    int di = st_dtype_lookup(dn, &bits);
    if (di < 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\": unknown dtype \"%.32s\"", path, name, dn);
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dn);
    t->dtype = k_st_dtypes[di].rc;
    size_t nd = json_array_size(js);
    if (nd > RC_ST_MAX_DIMS)
        return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\": %zu dimensions, at most %d supported",
                         path, name, nd, RC_ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t nelem = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\": shape[%zu] is not a non-negative integer",
                             path, name, i);
        t->shape[i] = (int64_t)json_integer_value(d);
        /* every prefix product must fit int64_t (shapes are int64_t here) */
        if (!rc_mul_u64(nelem, (uint64_t)t->shape[i], &nelem) || nelem > (uint64_t)INT64_MAX)
            return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\": shape product overflows 64 bits", path,
                             name);
    }
    if (json_array_size(jo) != 2)
        return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\": data_offsets must be [begin, end]", path,
                         name);
    json_t *b = json_array_get(jo, 0), *e = json_array_get(jo, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\": data_offsets must be non-negative integers",
                         path, name);
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(e);
    uint64_t nbits;
    if (!rc_mul_u64(nelem, (uint64_t)bits, &nbits))
        return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\": size in bits overflows 64 bits", path, name);
    if (nbits % 8 != 0)
        return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\": %llu bits is not a whole number of bytes",
                         path, name, (unsigned long long)nbits);
    /* the byte-range check happens after sorting, as in the reference */
    return RC_OK;
}

/* Members of the top-level JSON object of hdr[0, n): the ':' at depth 1
 * outside strings (exact for valid JSON). A cheap first pass, so that a
 * header with millions of entries is refused before jansson builds them. */
static uint64_t count_top_members(const char *h, size_t n)
{
    uint64_t count = 0;
    int64_t depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        const char c = h[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ':' && depth == 1) {
            count++;
        }
    }
    return count;
}

/* Make room for n more tensors in st->tensors (doubling). */
static rc_status st_reserve_tensors(rc_safetensors *st, int64_t n, const char *path)
{
    if (st->tensors && st->ntensors + n <= st->tensors_cap)
        return RC_OK;
    int64_t cap = st->tensors_cap ? st->tensors_cap : 64;
    while (cap < st->ntensors + n)
        cap *= 2;
    rc_st_tensor *grown = realloc(st->tensors, (size_t)cap * sizeof *grown);
    if (!grown)
        return rc_errorf(RC_ERR_NOMEM, "%s: out of memory", path);
    st->tensors = grown;
    st->tensors_cap = cap;
    return RC_OK;
}

/* Validate the header of an already-mapped file and append its tensors
 * (unsorted: st_finish sorts once every file is read). */
static rc_status st_parse(rc_safetensors *st, int fi)
{
    const rc_st_file *f = &st->files[fi];
    const char *path = f->path;
    if (f->size < 8)
        return rc_errorf(RC_ERR_FORMAT, "%s: file is %zu bytes, too small for the 8-byte header length",
                         path, f->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | f->map[i];
    if (n > RC_ST_MAX_HEADER)
        return rc_errorf(RC_ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit", path,
                         (unsigned long long)n, RC_ST_MAX_HEADER);
    uint64_t data_start;
    if (!rc_add_u64(8, n, &data_start) || data_start > f->size)
        return rc_errorf(RC_ERR_FORMAT, "%s: header length %llu runs past the end of the %zu-byte file",
                         path, (unsigned long long)n, f->size);
    const char *hdr = (const char *)f->map + 8;
    size_t bad;
    if (!rc_utf8_valid((const unsigned char *)hdr, (size_t)n, &bad))
        return rc_errorf(RC_ERR_FORMAT, "%s: header is not valid UTF-8 (byte %zu of the header)", path,
                         bad);
    /* one entry may be __metadata__ */
    if (count_top_members(hdr, (size_t)n) > (uint64_t)RC_ST_MAX_TENSORS_PER_FILE + 1)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: header has more than %d tensors (the limit per file)",
                         path, RC_ST_MAX_TENSORS_PER_FILE);
    json_error_t jerr;
    json_t *root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (strstr(jerr.text, "duplicate"))
            return rc_errorf(RC_ERR_FORMAT, "%s: duplicate tensor name in header (%s)", path, jerr.text);
        return rc_errorf(RC_ERR_FORMAT, "%s: header is not valid JSON (column %d: %s)", path,
                         jerr.column, jerr.text);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return rc_errorf(RC_ERR_FORMAT, "%s: header is not a JSON object", path);
    }
    size_t count = json_object_size(root);
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta) {
        count--;
        rc_status ms = RC_OK;
        if (json_is_null(meta)) {
            /* the reference reader treats "__metadata__": null as absent */
        } else if (!json_is_object(meta)) {
            ms = rc_errorf(RC_ERR_FORMAT, "%s: __metadata__ is not a JSON object", path);
        } else {
            const char *k;
            json_t *v;
            json_object_foreach(meta, k, v)
            {
                if (!json_is_string(v)) { /* message built while k is still alive */
                    ms = rc_errorf(RC_ERR_FORMAT, "%s: __metadata__ value \"%.200s\" is not a string",
                                   path, k);
                    break;
                }
            }
        }
        if (ms != RC_OK) {
            json_decref(root);
            return ms;
        }
    }
    if (count > (size_t)RC_ST_MAX_TENSORS_PER_FILE) { /* the first pass counted a stray ':' */
        json_decref(root);
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: header has more than %d tensors (the limit per file)",
                         path, RC_ST_MAX_TENSORS_PER_FILE);
    }
    if (st->ntensors + (int64_t)count > RC_ST_MAX_TENSORS) {
        json_decref(root);
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "%s: the model's files hold more than %d tensors in all (the limit per model)",
                         path, RC_ST_MAX_TENSORS);
    }
    rc_status s = st_reserve_tensors(st, (int64_t)count, path);
    if (s != RC_OK) {
        json_decref(root);
        return s;
    }
    /* parse straight into the free tail of st->tensors; it only counts as
     * appended once the whole file is valid */
    rc_st_tensor *local = st->tensors + st->ntensors;
    memset(local, 0, count * sizeof *local);
    size_t k = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        s = parse_entry(path, key, val, &local[k]);
        if (s == RC_OK) {
            local[k].name = strdup(key);
            local[k].file = fi;
            if (!local[k].name)
                s = rc_errorf(RC_ERR_NOMEM, "%s: out of memory", path);
        }
        k++;
        if (s != RC_OK)
            break;
    }
    json_decref(root);
    if (s == RC_OK) {
        qsort(local, count, sizeof *local, cmp_begin);
        uint64_t running = 0;
        for (size_t i = 0; i < count && s == RC_OK; i++) {
            rc_st_tensor *t = &local[i];
            if (t->begin != running || t->end < t->begin) {
                s = rc_errorf(RC_ERR_FORMAT,
                              "%s: tensor \"%s\": data_offsets [%llu, %llu] %s (expected begin %llu)",
                              path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                              t->end < t->begin     ? "end before begin"
                              : t->begin > running ? "leave a hole"
                                                   : "overlap the previous tensor",
                              (unsigned long long)running);
                break;
            }
            int bits = 0;
            st_dtype_lookup(t->dtype_name, &bits);
            uint64_t nelem = 1, nbytes;
            for (int d = 0; d < t->ndim; d++)
                rc_mul_u64(nelem, (uint64_t)t->shape[d], &nelem); /* checked in parse_entry */
            nbytes = nelem * (uint64_t)bits / 8;                  /* checked in parse_entry */
            if (t->end - t->begin != nbytes) {
                char sh[128];
                s = rc_errorf(RC_ERR_FORMAT,
                              "%s: tensor \"%s\": %s %s needs %llu bytes but data_offsets span %llu",
                              path, t->name, t->dtype_name,
                              rc_st_shape_str(sh, sizeof sh, t->ndim, t->shape),
                              (unsigned long long)nbytes, (unsigned long long)(t->end - t->begin));
                break;
            }
            running = t->end;
        }
        if (s == RC_OK && data_start + running != f->size)
            s = rc_errorf(RC_ERR_FORMAT,
                          "%s: tensor data ends at byte %llu but the file has %zu bytes%s", path,
                          (unsigned long long)(data_start + running), f->size,
                          data_start + running < f->size ? " (trailing bytes)" : " (truncated)");
    }
    if (s == RC_OK) {
        for (size_t i = 0; i < count; i++)
            local[i].data = f->map + data_start + local[i].begin;
        st->ntensors += (int64_t)count;
        return RC_OK;
    }
    for (size_t i = 0; i < count; i++) {
        free(local[i].name);
        local[i].name = NULL;
    }
    return s;
}

/* Once every file is read: sort the tensors by name (then file) and reject
 * a name held by two files, naming both. */
static rc_status st_finish(rc_safetensors *st)
{
    if (st->ntensors > 1)
        qsort(st->tensors, (size_t)st->ntensors, sizeof *st->tensors, cmp_name);
    for (int64_t i = 1; i < st->ntensors; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\" also appears in %s",
                             st->files[st->tensors[i].file].path, st->tensors[i].name,
                             st->files[st->tensors[i - 1].file].path);
    return RC_OK;
}

static rc_status st_map_file(rc_safetensors *st, const char *path)
{
    if (st->nfiles == st->files_cap) {
        int cap = st->files_cap ? 2 * st->files_cap : 4;
        rc_st_file *grown = realloc(st->files, (size_t)cap * sizeof *grown);
        if (!grown)
            return rc_errorf(RC_ERR_NOMEM, "%s: out of memory", path);
        st->files = grown;
        st->files_cap = cap;
    }
    rc_st_file *f = &st->files[st->nfiles];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        return rc_errorf(RC_ERR_NOMEM, "%s: out of memory", path);
    st->nfiles++;
    int fd;
    int64_t fsize;
    RC_TRY(rc_open_regular(path, &fd, &fsize)); /* a FIFO must not block */
    f->size = (size_t)fsize;
    if (f->size > 0) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            f->size = 0;
            return rc_errorf(RC_ERR_IO, "%s: cannot mmap: %s", path, strerror(errno));
        }
        f->map = m;
    }
    close(fd);
    return st_parse(st, st->nfiles - 1);
}

rc_status rc_st_open_file(const char *path, rc_safetensors **out)
{
    *out = NULL;
    rc_safetensors *st = calloc(1, sizeof *st);
    if (!st)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    rc_status s = st_map_file(st, path);
    if (s == RC_OK)
        s = st_finish(st);
    if (s != RC_OK) {
        rc_st_close(st);
        return s;
    }
    *out = st;
    return RC_OK;
}

/* ---- sorting strings with where they came from --------------------------- */

typedef struct {
    const char *s;
    size_t i; /* its index in the input: ties sort by it */
} str_ix;

static int cmp_str_ix(const void *a, const void *b)
{
    const str_ix *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    if (c != 0)
        return c;
    return (x->i > y->i) - (x->i < y->i);
}

/* the groups naming one shard: ent[start, end) after sorting by name */
typedef struct {
    size_t first; /* the first group (in index order) that names it */
    size_t start, end;
} shard_run;

static int cmp_first(const void *a, const void *b)
{
    const shard_run *x = a, *y = b;
    return (x->first > y->first) - (x->first < y->first);
}

/* ---- sharded checkpoints ------------------------------------------------ */

/* A shard path from the index must be a plain relative path, as
 * save_pretrained writes it: not absolute, and no empty, "." or ".."
 * component. NULL when it is, else what is wrong. */
static const char *shard_path_problem(const char *p, size_t len)
{
    if (len == 0)
        return "is empty";
    if (strlen(p) != len)
        return "contains a NUL byte";
    if (p[0] == '/')
        return "is absolute: it leaves the model folder";
    for (const char *c = p;;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0)
            return "has an empty component (\"//\" or a trailing \"/\")";
        if (n == 1 && c[0] == '.')
            return "has a \".\" component (shard paths must be plain relative paths)";
        if (n == 2 && c[0] == '.' && c[1] == '.')
            return "has a \"..\" component (it leaves the model folder, or leaves and comes back)";
        if (!e)
            return NULL;
        c = e + 1;
    }
}

/* A shard named in the index must be a regular file inside the model folder
 * once symlinks are resolved. *full_out gets its resolved (realpath) location. */
static rc_status check_shard_path(const char *index_path, const char *dir, const char *rdir,
                                  const char *shard, char **full_out)
{
    *full_out = NULL;
    char *full = rc_path_join(dir, shard);
    if (!full)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    char rfull[PATH_MAX];
    if (!realpath(full, rfull)) {
        rc_status s = rc_errorf(RC_ERR_IO, "%s: shard \"%s\" cannot be opened: %s", index_path, shard,
                                strerror(errno));
        free(full);
        return s;
    }
    free(full);
    size_t dl = strlen(rdir);
    if (dl == 1) /* the model folder is "/" */
        dl = 0;
    if (strncmp(rfull, rdir, dl) != 0 || rfull[dl] != '/')
        return rc_errorf(RC_ERR_FORMAT, "%s: shard path \"%s\" leaves the model folder (resolves to %s)",
                         index_path, shard, rfull);
    *full_out = strdup(rfull);
    if (!*full_out)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    return RC_OK;
}

/* O(N log N) in the index entries and shards, whatever the names: the
 * entries' shard names are sorted once to find the distinct shards (their
 * count is checked before any file is opened), each distinct name is resolved
 * once, each distinct file opened once (in order of first appearance), the
 * tensors are sorted once, and each entry is then checked with one lookup. */
static rc_status st_open_index(const char *dir, const char *index_path, rc_safetensors *st)
{
    json_t *root;
    RC_TRY(rc_json_load_object(index_path, 64u << 20, &root));
    rc_status s = RC_OK;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        json_decref(root);
        return rc_errorf(RC_ERR_FORMAT, "%s: \"weight_map\" must be a non-empty object", index_path);
    }
    const size_t n_entries = json_object_size(wm);
    if (n_entries > (size_t)RC_ST_MAX_TENSORS) {
        json_decref(root);
        return rc_errorf(RC_ERR_UNSUPPORTED,
                         "%s: weight_map lists %zu tensors, more than the limit of %d per model",
                         index_path, n_entries, RC_ST_MAX_TENSORS);
    }
    char rdir[PATH_MAX];
    if (!realpath(dir, rdir)) {
        json_decref(root);
        return rc_errorf(RC_ERR_IO, "%s: cannot resolve: %s", dir, strerror(errno));
    }
    /* consecutive entries naming the same shard form one group (indexes
     * list a shard's tensors mostly together): only groups are sorted */
    str_ix *ent = calloc(n_entries, sizeof *ent);           /* (shard name, group) */
    size_t *shard_of = calloc(n_entries, sizeof *shard_of); /* entry -> group, then -> shard */
    size_t *shard_of_group = calloc(n_entries, sizeof *shard_of_group);
    size_t n_groups = 0;
    shard_run *runs = NULL;                                 /* shard -> its entries */
    str_ix *res = NULL;                                     /* (resolved path, shard) */
    char **full = NULL;                                     /* shard -> resolved path */
    size_t *canon = NULL; /* shard -> the first shard that resolves to the same file */
    int *file_of = NULL;  /* shard -> index into st->files */
    size_t n_sh = 0;
    const char *name;
    json_t *v;
    if (!ent || !shard_of || !shard_of_group) {
        s = rc_errorf(RC_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* 1. every entry names its shard by a plain relative path */
    size_t e = 0;
    json_object_foreach(wm, name, v)
    {
        if (!json_is_string(v)) {
            s = rc_errorf(RC_ERR_FORMAT, "%s: weight_map[\"%s\"] is not a string", index_path, name);
            break;
        }
        const char *shard = json_string_value(v);
        const char *why = shard_path_problem(shard, json_string_length(v));
        if (why) {
            s = rc_errorf(RC_ERR_FORMAT, "%s: weight_map[\"%s\"]: shard path \"%s\" %s", index_path, name,
                          shard, why);
            break;
        }
        if (n_groups == 0 || strcmp(ent[n_groups - 1].s, shard) != 0) {
            ent[n_groups].s = shard;
            ent[n_groups].i = n_groups;
            n_groups++;
        }
        shard_of[e++] = n_groups - 1;
    }
    if (s != RC_OK)
        goto done;
    /* 2. the distinct shards, numbered in order of first appearance */
    qsort(ent, n_groups, sizeof *ent, cmp_str_ix);
    for (size_t k = 0; k < n_groups; k++)
        n_sh += k == 0 || strcmp(ent[k - 1].s, ent[k].s) != 0;
    if (n_sh > (size_t)RC_ST_MAX_SHARDS) {
        s = rc_errorf(RC_ERR_UNSUPPORTED, "%s: weight_map names %zu shards, more than the limit of %d per model",
                      index_path, n_sh, RC_ST_MAX_SHARDS);
        goto done;
    }
    runs = calloc(n_sh, sizeof *runs);
    res = calloc(n_sh, sizeof *res);
    full = calloc(n_sh, sizeof *full);
    canon = calloc(n_sh, sizeof *canon);
    file_of = calloc(n_sh, sizeof *file_of);
    if (!runs || !res || !full || !canon || !file_of) {
        s = rc_errorf(RC_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t k = 0, j = 0; k < n_groups; k++) {
        if (k == 0 || strcmp(ent[k - 1].s, ent[k].s) != 0) {
            runs[j].first = ent[k].i; /* a run is sorted by group */
            runs[j].start = k;
            j++;
        }
        runs[j - 1].end = k + 1;
    }
    qsort(runs, n_sh, sizeof *runs, cmp_first);
    for (size_t j = 0; j < n_sh; j++)
        for (size_t k = runs[j].start; k < runs[j].end; k++)
            shard_of_group[ent[k].i] = j;
    for (size_t k = 0; k < n_entries; k++)
        shard_of[k] = shard_of_group[shard_of[k]];
    /* 3. resolve each shard once: symlinks must stay inside the folder */
    for (size_t j = 0; j < n_sh && s == RC_OK; j++) {
        s = check_shard_path(index_path, dir, rdir, ent[runs[j].start].s, &full[j]);
        res[j].s = full[j];
        res[j].i = j;
    }
    if (s != RC_OK)
        goto done;
    /* 4. shards that resolve to the same file (through a symlink) share it:
     * each file is opened once, for the first shard that reaches it */
    qsort(res, n_sh, sizeof *res, cmp_str_ix);
    for (size_t k = 0, first = 0; k < n_sh; k++) {
        if (k == 0 || strcmp(res[k - 1].s, res[k].s) != 0)
            first = res[k].i; /* equal paths sort by shard */
        canon[res[k].i] = first;
    }
    for (size_t j = 0; j < n_sh && s == RC_OK; j++) {
        if (canon[j] != j) {
            file_of[j] = file_of[canon[j]];
            continue;
        }
        s = st_map_file(st, full[j]);
        file_of[j] = st->nfiles - 1;
    }
    if (s == RC_OK)
        s = st_finish(st);
    /* 5. every listed tensor must be in the shard the index names */
    e = 0;
    if (s == RC_OK) {
        json_object_foreach(wm, name, v)
        {
            const rc_st_tensor *t = rc_st_find(st, name);
            const char *shard = json_string_value(v);
            if (!t) {
                s = rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\" is listed for %s but is not in it",
                              index_path, name, shard);
                break;
            }
            if (t->file != file_of[shard_of[e]]) {
                s = rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\" is listed for %s but found in %s",
                              index_path, name, shard, st->files[t->file].path);
                break;
            }
            e++;
        }
    }
done:
    for (size_t j = 0; full && j < n_sh; j++)
        free(full[j]);
    free(full);
    free(ent);
    free(shard_of);
    free(shard_of_group);
    free(runs);
    free(res);
    free(canon);
    free(file_of);
    json_decref(root);
    return s;
}

static rc_status st_quant_from_dir(rc_safetensors *st, const char *dir);

rc_status rc_st_open_dir(const char *dir, rc_safetensors **out)
{
    *out = NULL;
    rc_safetensors *st = calloc(1, sizeof *st);
    if (!st)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    char *index = rc_path_join(dir, "model.safetensors.index.json");
    char *single = rc_path_join(dir, "model.safetensors");
    rc_status s;
    if (!index || !single)
        s = rc_errorf(RC_ERR_NOMEM, "out of memory");
    else if (rc_file_exists(index))
        s = st_open_index(dir, index, st);
    else if (rc_file_exists(single)) {
        s = st_map_file(st, single);
        if (s == RC_OK)
            s = st_finish(st);
    } else
        s = rc_errorf(RC_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", dir);
    free(index);
    free(single);
    if (s == RC_OK)
        s = st_quant_from_dir(st, dir);
    if (s != RC_OK) {
        rc_st_close(st);
        return s;
    }
    *out = st;
    return RC_OK;
}

/* st->tensors is kept sorted by name: binary search */
const rc_st_tensor *rc_st_find(const rc_safetensors *st, const char *name)
{
    int64_t lo = 0, hi = st->ntensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[mid].name, name);
        if (c == 0)
            return &st->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* by name, then by file (so a duplicate's later file comes second) */
static int cmp_name(const void *a, const void *b)
{
    const rc_st_tensor *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c != 0)
        return c;
    return (x->file > y->file) - (x->file < y->file);
}

const char *rc_st_path_of(const rc_safetensors *st, const rc_st_tensor *t)
{
    return st->files[t->file].path;
}

static rc_status check_tensor(const rc_safetensors *st, const char *name, int ndim,
                              const int64_t *shape, const rc_st_tensor **out, const char *want_dt)
{
    const rc_st_tensor *t = rc_st_find(st, name);
    char want[128], got[128];
    rc_st_shape_str(want, sizeof want, ndim, shape);
    if (!t)
        return rc_errorf(RC_ERR_FORMAT, "tensor \"%s\" is missing (expected %s %s)", name, want_dt, want);
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (!ok)
        return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\" has shape %s %s, expected %s %s",
                         rc_st_path_of(st, t), name, t->dtype_name,
                         rc_st_shape_str(got, sizeof got, t->ndim, t->shape), want_dt, want);
    *out = t;
    return RC_OK;
}

/* Convert tensor t (n elements) to fp32 into dst. With n_bad: *n_bad gets
 * the number of results that are not finite and *first_bad the index of the
 * first (-1 when none). NaN and Inf are the fp32 values whose magnitude bits
 * are at least 0x7F800000: the conversion loops keep the largest magnitude
 * bits seen (a max reduction the compiler vectorizes, in the same pass), and
 * only a tensor that holds a non-finite value is scanned again to count. */
static rc_status convert_f32(const rc_safetensors *st, const rc_st_tensor *t, int64_t n, float *dst,
                             int64_t *n_bad, int64_t *first_bad)
{
    const unsigned char *p;
    RC_TRY(st_bytes(st, t, &p));
    uint32_t mx = 0;
    switch (t->dtype) {
    case RC_F32:
        if (!n_bad) {
            memcpy(dst, p, (size_t)n * 4);
            break;
        }
        for (int64_t b = 0; b < n; b += 4096) { /* copy a block, then its max while in cache */
            const int64_t e = n - b < 4096 ? n : b + 4096;
            memcpy(dst + b, p + 4 * b, (size_t)(e - b) * 4);
            for (int64_t i = b; i < e; i++) {
                uint32_t u;
                memcpy(&u, dst + i, 4);
                u &= 0x7FFFFFFFu;
                mx = u > mx ? u : mx;
            }
        }
        break;
    case RC_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = rc_f16_to_f32(h);
            uint32_t u = (uint32_t)(h & 0x7C00u); /* exponent all ones: Inf or NaN */
            mx = u > mx ? u : mx;
        }
        mx = mx == 0x7C00u ? 0x7F800000u : 0;
        break;
    case RC_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = rc_bf16_to_f32(h);
            uint32_t u = (uint32_t)(h & 0x7FFFu) << 16;
            mx = u > mx ? u : mx;
        }
        break;
    case RC_F64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
            uint32_t u;
            memcpy(&u, dst + i, 4);
            u &= 0x7FFFFFFFu;
            mx = u > mx ? u : mx;
        }
        break;
    default: {
        char got[128];
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: tensor \"%s\" has dtype %s %s, expected F32, F16, BF16 or F64",
                         rc_st_path_of(st, t), t->name, t->dtype_name,
                         rc_st_shape_str(got, sizeof got, t->ndim, t->shape));
    }
    }
    if (n_bad) {
        *n_bad = 0;
        *first_bad = -1;
        if (mx >= 0x7F800000u) /* rare: count them */
            for (int64_t i = n - 1; i >= 0; i--)
                if (!isfinite(dst[i])) {
                    ++*n_bad;
                    *first_bad = i;
                }
    }
    return RC_OK;
}

rc_status rc_st_read_f32(const rc_safetensors *st, const char *name, int ndim,
                         const int64_t *shape, float *dst)
{
    const rc_st_tensor *t;
    RC_TRY(check_tensor(st, name, ndim, shape, &t, "F32/F16/BF16/F64"));
    int64_t n;
    rc_numel(t->shape, t->ndim, &n);
    return convert_f32(st, t, n, dst, NULL, NULL);
}

rc_status rc_st_check_weight(const rc_safetensors *st, const char *name, int ndim, const int64_t *shape)
{
    const rc_st_tensor *t;
    RC_TRY(check_tensor(st, name, ndim, shape, &t, "F32/F16/BF16/F64"));
    if (t->dtype != RC_F32 && t->dtype != RC_F16 && t->dtype != RC_BF16 && t->dtype != RC_F64) {
        char got[128];
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: tensor \"%s\" has dtype %s %s, expected F32, F16, BF16 or F64",
                         rc_st_path_of(st, t), t->name, t->dtype_name,
                         rc_st_shape_str(got, sizeof got, t->ndim, t->shape));
    }
    return RC_OK;
}

/* Count the non-finite values of n stored elements (F32, BF16, F16 bits;
 * possibly unaligned): a max over the magnitude bits first (vectorizes),
 * counting only when it says there is one. */
static void scan_finite(const unsigned char *p, int dtype, int64_t n, int64_t *n_bad, int64_t *first_bad)
{
    *n_bad = 0;
    *first_bad = -1;
    uint32_t mx = 0, lim;
    if (dtype == RC_F32) {
        lim = 0x7F800000u;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            u &= 0x7FFFFFFFu;
            mx = u > mx ? u : mx;
        }
    } else {
        lim = dtype == RC_BF16 ? 0x7F80u : 0x7C00u;
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            uint32_t u = h & 0x7FFFu;
            mx = u > mx ? u : mx;
        }
    }
    if (mx < lim)
        return;
    const int es = dtype == RC_F32 ? 4 : 2;
    const uint32_t mag = es == 4 ? 0x7FFFFFFFu : 0x7FFFu;
    for (int64_t i = n - 1; i >= 0; i--) {
        uint32_t u;
        if (es == 4) {
            memcpy(&u, p + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            u = h;
        }
        if ((u & mag) >= lim) {
            ++*n_bad;
            *first_bad = i;
        }
    }
}

static rc_status bad_values(const rc_safetensors *st, const rc_st_tensor *t, int64_t n, int64_t bad,
                            int64_t first)
{
    char sh[128];
    return rc_errorf(RC_ERR_FORMAT,
                     "%s: tensor \"%s\" (%s %s) has %lld non-finite values (NaN or Inf%s) of %lld, the "
                     "first at element %lld",
                     rc_st_path_of(st, t), t->name, t->dtype_name, rc_st_shape_str(sh, sizeof sh, t->ndim, t->shape),
                     (long long)bad, t->dtype == RC_F64 ? ", or beyond the fp32 range" : "", (long long)n,
                     (long long)first);
}

rc_status rc_st_weight_view(const rc_safetensors *st, const char *name, int ndim, const int64_t *shape,
                            bool scan, const void **data, int *dtype, bool *aligned)
{
    const rc_st_tensor *t;
    RC_TRY(rc_st_check_weight(st, name, ndim, shape));
    RC_TRY(check_tensor(st, name, ndim, shape, &t, "F32/F16/BF16/F64"));
    const int es = rc_dtype_size((rc_dtype)t->dtype);
    if (t->quant && !scan) { /* computed when read (rc_st_read_weight_as), not here */
        *data = NULL;
        *dtype = t->dtype;
        *aligned = false;
        return RC_OK;
    }
    const unsigned char *p;
    RC_TRY(st_bytes(st, t, &p));
    *data = p;
    *dtype = t->dtype;
    *aligned = !t->quant && ((uintptr_t)p % (uintptr_t)es) == 0;
    if (scan && t->dtype != RC_F64) {
        int64_t n, bad, first;
        rc_numel(t->shape, t->ndim, &n);
        scan_finite(p, t->dtype, n, &bad, &first);
        if (bad)
            return bad_values(st, t, n, bad, first);
    }
    return RC_OK;
}

rc_status rc_st_read_weight_as(const rc_safetensors *st, const char *name, int ndim, const int64_t *shape,
                               rc_dtype dt, void *dst)
{
    const rc_st_tensor *t;
    RC_TRY(rc_st_check_weight(st, name, ndim, shape));
    RC_TRY(check_tensor(st, name, ndim, shape, &t, "F32/F16/BF16/F64"));
    int64_t n, bad = 0, first = -1;
    rc_numel(t->shape, t->ndim, &n);
    if (dt == RC_F32) {
        RC_TRY(convert_f32(st, t, n, dst, &bad, &first));
        st_drop_deq(t);
    } else if ((int)dt == t->dtype && (dt == RC_BF16 || dt == RC_F16)) {
        const unsigned char *p;
        RC_TRY(st_bytes(st, t, &p));
        memcpy(dst, p, (size_t)n * 2);
        st_drop_deq(t);
        scan_finite(dst, t->dtype, n, &bad, &first);
    } else {
        return rc_errorf(RC_ERR_INTERNAL, "tensor \"%s\": cannot read %s as %s", name, t->dtype_name,
                         rc_dtype_name(dt));
    }
    return bad ? bad_values(st, t, n, bad, first) : RC_OK;
}

rc_status rc_st_read_weight(const rc_safetensors *st, const char *name, int ndim,
                            const int64_t *shape, float *dst)
{
    return rc_st_read_weight_as(st, name, ndim, shape, RC_F32, dst);
}

void rc_st_release(const rc_safetensors *st, const void *p, size_t n)
{
    const uintptr_t a = (uintptr_t)p;
    for (int i = 0; st && i < st->nfiles; i++) {
        const uintptr_t m0 = (uintptr_t)st->files[i].map, m1 = m0 + st->files[i].size;
        if (!st->files[i].map || a < m0 || a + n > m1)
            continue;
        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        const uintptr_t lo = (a + pg - 1) / pg * pg, hi = (a + n) / pg * pg; /* whole pages inside */
        if (hi > lo) /* a read-only private file map: the pages are dropped and read again on use */
            (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
        return;
    }
}

rc_status rc_st_read_i32(const rc_safetensors *st, const char *name, int ndim,
                         const int64_t *shape, int32_t *dst)
{
    const rc_st_tensor *t;
    RC_TRY(check_tensor(st, name, ndim, shape, &t, "I32"));
    if (t->dtype != RC_I32)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: tensor \"%s\" has dtype %s, expected I32", rc_st_path_of(st, t),
                         name, t->dtype_name);
    int64_t n;
    rc_numel(t->shape, t->ndim, &n);
    memcpy(dst, t->data, (size_t)n * 4);
    return RC_OK;
}

rc_status rc_st_read_f64(const rc_safetensors *st, const char *name, int ndim,
                         const int64_t *shape, double *dst)
{
    const rc_st_tensor *t;
    RC_TRY(check_tensor(st, name, ndim, shape, &t, "F64"));
    if (t->dtype != RC_F64)
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: tensor \"%s\" has dtype %s, expected F64", rc_st_path_of(st, t),
                         name, t->dtype_name);
    int64_t n;
    rc_numel(t->shape, t->ndim, &n);
    memcpy(dst, t->data, (size_t)n * 8);
    return RC_OK;
}

/* ---- quantized checkpoints (src/formats/quant.h) ---- */

static void tally_stored(rc_safetensors *st)
{
    st->nstored = 0;
    for (int64_t i = 0; i < st->ntensors; i++) {
        const rc_st_tensor *t = &st->tensors[i];
        int k = 0;
        while (k < st->nstored && strcmp(st->stored[k].dtype_name, t->dtype_name) != 0)
            k++;
        if (k == st->nstored) {
            if (k == (int)(sizeof st->stored / sizeof st->stored[0]))
                continue; /* more dtypes than the reader knows: cannot happen */
            snprintf(st->stored[k].dtype_name, sizeof st->stored[k].dtype_name, "%s", t->dtype_name);
            st->stored[k].count = 0;
            st->stored[k].bytes = 0;
            st->nstored++;
        }
        st->stored[k].count++;
        st->stored[k].bytes += t->end - t->begin;
    }
}

static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

static rc_status quant_fp8(rc_safetensors *st, const char *path, const int64_t blk[2], rc_dtype out_dt,
                           bool *drop)
{
    char sh[128], want[128];
    for (int64_t i = 0; i < st->ntensors; i++) {
        rc_st_tensor *t = &st->tensors[i];
        if (strcmp(t->dtype_name, "F8_E4M3") != 0)
            continue;
        const char *tp = rc_st_path_of(st, t);
        if (t->ndim < 2)
            return rc_errorf(RC_ERR_FORMAT, "%s: F8_E4M3 tensor \"%s\" has shape %s, expected at least 2 dimensions",
                             tp, t->name, rc_st_shape_str(sh, sizeof sh, t->ndim, t->shape));
        char sname[1024];
        if ((size_t)snprintf(sname, sizeof sname, "%s_scale_inv", t->name) >= sizeof sname)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: tensor name \"%s\" is too long", tp, t->name);
        const rc_st_tensor *sc = rc_st_find(st, sname);
        if (!sc)
            return rc_errorf(RC_ERR_FORMAT, "%s: F8_E4M3 tensor \"%s\" has no \"%s\" (%s quant_method fp8)", tp,
                             t->name, sname, path);
        const char *sp = rc_st_path_of(st, sc);
        if (sc->dtype != RC_F32 && sc->dtype != RC_BF16)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: scale tensor \"%s\" has dtype %s, expected F32 or BF16", sp,
                             sname, sc->dtype_name);
        int64_t wsh[RC_ST_MAX_DIMS];
        memcpy(wsh, t->shape, sizeof wsh);
        const int nd = t->ndim;
        const int64_t rows = t->shape[nd - 2], cols = t->shape[nd - 1];
        wsh[nd - 2] = ceil_div(rows, blk[0]);
        wsh[nd - 1] = ceil_div(cols, blk[1]);
        bool ok = sc->ndim == nd;
        for (int d = 0; ok && d < nd; d++)
            ok = sc->shape[d] == wsh[d];
        if (!ok)
            return rc_errorf(RC_ERR_FORMAT,
                             "%s: scale tensor \"%s\" has shape %s, expected %s for weight %s in blocks of "
                             "[%lld, %lld] (%s weight_block_size)",
                             sp, sname, rc_st_shape_str(sh, sizeof sh, sc->ndim, sc->shape),
                             rc_st_shape_str(want, sizeof want, nd, wsh),
                             rc_st_shape_str(sh + 64, sizeof sh - 64, nd, t->shape), (long long)blk[0],
                             (long long)blk[1], path);
        int64_t ns;
        rc_numel(sc->shape, sc->ndim, &ns);
        for (int64_t k = 0; k < ns; k++) {
            float v;
            if (sc->dtype == RC_F32) {
                memcpy(&v, sc->data + 4 * k, 4);
            } else {
                uint16_t h;
                memcpy(&h, sc->data + 2 * k, 2);
                v = rc_bf16_to_f32(h);
            }
            if (!(isfinite(v) && v > 0))
                return rc_errorf(RC_ERR_FORMAT, "%s: scale tensor \"%s\" element %lld is %g, expected finite and > 0",
                                 sp, sname, (long long)k, (double)v);
        }
        int64_t outer = 1;
        for (int d = 0; d < nd - 2; d++)
            outer *= t->shape[d]; /* bounded by the tensor's numel, checked on parse */
        t->quant = RC_ST_Q_FP8_BLOCK;
        t->qscale = sc->data;
        t->qscale_dtype = sc->dtype;
        t->qdim[0] = outer;
        t->qdim[1] = rows;
        t->qdim[2] = cols;
        t->qblock[0] = blk[0];
        t->qblock[1] = blk[1];
        t->dtype = (int)out_dt;
        snprintf(t->dtype_name, sizeof t->dtype_name, "%s",
                 out_dt == RC_F32 ? "F32" : out_dt == RC_F16 ? "F16" : "BF16");
        drop[sc - st->tensors] = true;
    }
    return RC_OK;
}

static rc_status quant_mxfp4(rc_safetensors *st, rc_dtype out_dt, bool *drop)
{
    char sh[128], want[128];
    const int64_t n0 = st->ntensors;
    for (int64_t i = 0; i < n0; i++) {
        rc_st_tensor *t = &st->tensors[i];
        const size_t len = strlen(t->name);
        if (len <= 7 || strcmp(t->name + len - 7, "_blocks") != 0 || strcmp(t->dtype_name, "U8") != 0)
            continue;
        const char *tp = rc_st_path_of(st, t);
        if (t->ndim != 4 || t->shape[3] != 16)
            return rc_errorf(RC_ERR_FORMAT, "%s: MXFP4 tensor \"%s\" has shape %s, expected [experts, rows, blocks, 16]",
                             tp, t->name, rc_st_shape_str(sh, sizeof sh, t->ndim, t->shape));
        char base[1024], sname[1040];
        if (len - 7 >= sizeof base - 8)
            return rc_errorf(RC_ERR_UNSUPPORTED, "%s: tensor name \"%s\" is too long", tp, t->name);
        memcpy(base, t->name, len - 7);
        base[len - 7] = 0;
        snprintf(sname, sizeof sname, "%s_scales", base);
        const rc_st_tensor *sc = rc_st_find(st, sname);
        if (!sc)
            return rc_errorf(RC_ERR_FORMAT, "%s: MXFP4 tensor \"%s\" has no \"%s\"", tp, t->name, sname);
        const char *sp = rc_st_path_of(st, sc);
        if (strcmp(sc->dtype_name, "U8") != 0 || sc->ndim != 3 || sc->shape[0] != t->shape[0] ||
            sc->shape[1] != t->shape[1] || sc->shape[2] != t->shape[2])
            return rc_errorf(RC_ERR_FORMAT, "%s: MXFP4 scales \"%s\" are %s %s, expected U8 %s", sp, sname,
                             sc->dtype_name, rc_st_shape_str(sh, sizeof sh, sc->ndim, sc->shape),
                             rc_st_shape_str(want, sizeof want, 3, t->shape));
        if (rc_st_find(st, base))
            return rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\" is stored both as itself and as MXFP4 blocks", tp, base);
        int64_t ns;
        rc_numel(sc->shape, 3, &ns);
        for (int64_t k = 0; k < ns; k++)
            if (sc->data[k] == 255)
                return rc_errorf(RC_ERR_FORMAT, "%s: MXFP4 scale \"%s\" element %lld is 255 (e8m0 NaN)", sp, sname,
                                 (long long)k);
        int64_t g32;
        if (!rc_mul_i64(t->shape[2], 32, &g32))
            return rc_errorf(RC_ERR_FORMAT, "%s: MXFP4 tensor \"%s\" is too large", tp, t->name);
        char *nn = strdup(base);
        if (!nn)
            return rc_errorf(RC_ERR_NOMEM, "out of memory");
        free(t->name);
        t->name = nn;
        t->quant = RC_ST_Q_MXFP4;
        t->qscale = sc->data;
        t->qscale_dtype = -1;
        t->qdim[0] = t->shape[0];
        t->qdim[1] = t->shape[1];
        t->qdim[2] = t->shape[2];
        t->ndim = 3;
        t->shape[1] = g32;
        t->shape[2] = t->qdim[1];
        t->shape[3] = 0;
        t->dtype = (int)out_dt;
        snprintf(t->dtype_name, sizeof t->dtype_name, "%s",
                 out_dt == RC_F32 ? "F32" : out_dt == RC_F16 ? "F16" : "BF16");
        drop[sc - st->tensors] = true;
    }
    return RC_OK;
}

rc_status rc_st_apply_quant(rc_safetensors *st, const char *text, size_t len, const char *path)
{
    json_t *root = NULL;
    RC_TRY(rc_json_parse_object(text, len, path, &root));
    rc_status s = RC_OK;
    bool *drop = NULL;
    const json_t *qc = json_object_get(root, "quantization_config");
    if (!qc || json_is_null(qc))
        goto done;
    if (!json_is_object(qc)) {
        s = rc_errorf(RC_ERR_FORMAT, "%s: quantization_config is not an object", path);
        goto done;
    }
    const char *method = NULL;
    s = rc_json_get_str(qc, "quant_method", path, NULL, &method, NULL);
    if (s != RC_OK)
        goto done;
    if (!method) {
        s = rc_errorf(RC_ERR_FORMAT, "%s: quantization_config has no quant_method", path);
        goto done;
    }
    const bool fp8 = strcmp(method, "fp8") == 0, mx = strcmp(method, "mxfp4") == 0;
    if (!fp8 && !mx) {
        s = rc_errorf(RC_ERR_UNSUPPORTED, "%s: quantization_config.quant_method \"%s\" is not supported (fp8, mxfp4)",
                      path, method);
        goto done;
    }
    snprintf(st->quant_method, sizeof st->quant_method, "%s", method);
    rc_dtype out_dt = RC_BF16; /* the model's dtype, as transformers dequantizes into the parameter's dtype */
    const json_t *dj = json_object_get(root, "dtype");
    if (!json_is_string(dj))
        dj = json_object_get(root, "torch_dtype");
    if (json_is_string(dj)) {
        const int d = rc_dtype_from_str(json_string_value(dj));
        if (d == RC_F32 || d == RC_F16)
            out_dt = (rc_dtype)d;
    }
    drop = calloc((size_t)st->ntensors + 1, sizeof *drop);
    if (!drop) {
        s = rc_errorf(RC_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (fp8) {
        const json_t *bs = json_object_get(qc, "weight_block_size");
        if (!json_is_array(bs) || json_array_size(bs) != 2 || !json_is_integer(json_array_get(bs, 0)) ||
            !json_is_integer(json_array_get(bs, 1))) {
            s = rc_errorf(RC_ERR_UNSUPPORTED, "%s: quantization_config.weight_block_size is not a pair of integers "
                                              "(per-tensor FP8 scales are not supported)", path);
            goto done;
        }
        int64_t blk[2];
        for (int k = 0; k < 2; k++) {
            blk[k] = (int64_t)json_integer_value(json_array_get(bs, (size_t)k));
            if (blk[k] < 1 || blk[k] > 65536) {
                s = rc_errorf(RC_ERR_FORMAT, "%s: quantization_config.weight_block_size[%d] = %lld, expected 1 to 65536",
                              path, k, (long long)blk[k]);
                goto done;
            }
        }
        s = quant_fp8(st, path, blk, out_dt, drop);
    } else {
        s = quant_mxfp4(st, out_dt, drop);
    }
    if (s != RC_OK)
        goto done;
    int64_t w = 0;
    for (int64_t i = 0; i < st->ntensors; i++) {
        if (drop[i]) {
            free(st->tensors[i].name);
            free(st->tensors[i].deq);
            continue;
        }
        st->tensors[w++] = st->tensors[i];
    }
    st->ntensors = w;
    qsort(st->tensors, (size_t)st->ntensors, sizeof *st->tensors, cmp_name);
done:
    free(drop);
    json_decref(root);
    return s;
}

static rc_status st_quant_from_dir(rc_safetensors *st, const char *dir)
{
    tally_stored(st);
    char *cfg = rc_path_join(dir, "config.json");
    if (!cfg)
        return rc_errorf(RC_ERR_NOMEM, "out of memory");
    rc_status s = RC_OK;
    if (rc_file_exists(cfg)) {
        char *text = NULL;
        size_t len = 0;
        s = rc_read_file(cfg, &text, &len, 16u << 20);
        if (s == RC_OK)
            s = rc_st_apply_quant(st, text, len, cfg);
        free(text);
    }
    free(cfg);
    return s;
}

/* the bytes of t as its dtype: the mapped data, or the dequantized values
 * (computed once) */
static rc_status st_bytes(const rc_safetensors *st, const rc_st_tensor *t, const unsigned char **p)
{
    if (!t->quant) {
        *p = t->data;
        return RC_OK;
    }
    rc_st_tensor *m = (rc_st_tensor *)t; /* the cache of a const view */
    if (!m->deq) {
        int64_t n, nb;
        rc_numel(t->shape, t->ndim, &n);
        if (!rc_mul_i64(n, rc_dtype_size((rc_dtype)t->dtype), &nb) || !(m->deq = malloc((size_t)nb)))
            return rc_errorf(RC_ERR_NOMEM, "%s: tensor \"%s\": out of memory dequantizing", rc_st_path_of(st, t),
                             t->name);
        if (t->quant == RC_ST_Q_MXFP4) {
            rc_mxfp4_dequant(t->data, t->qscale, t->qdim[0], t->qdim[1], t->qdim[2], (rc_dtype)t->dtype, m->deq);
        } else {
            const int64_t ns = t->qdim[0] * ceil_div(t->qdim[1], t->qblock[0]) * ceil_div(t->qdim[2], t->qblock[1]);
            float *sc = malloc((size_t)ns * sizeof *sc);
            if (!sc) {
                free(m->deq);
                m->deq = NULL;
                return rc_errorf(RC_ERR_NOMEM, "out of memory");
            }
            for (int64_t k = 0; k < ns; k++) {
                if (t->qscale_dtype == RC_F32) {
                    memcpy(&sc[k], t->qscale + 4 * k, 4);
                } else {
                    uint16_t h;
                    memcpy(&h, t->qscale + 2 * k, 2);
                    sc[k] = rc_bf16_to_f32(h);
                }
            }
            rc_fp8_block_dequant(t->data, sc, t->qdim[0], t->qdim[1], t->qdim[2], t->qblock[0], t->qblock[1],
                                 (rc_dtype)t->dtype, m->deq);
            free(sc);
        }
    }
    *p = m->deq;
    return RC_OK;
}

static void st_drop_deq(const rc_st_tensor *t)
{
    rc_st_tensor *m = (rc_st_tensor *)t;
    free(m->deq);
    m->deq = NULL;
}
