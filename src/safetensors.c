#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json_util.h"
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
    for (int64_t i = 0; i < st->ntensors; i++)
        free(st->tensors[i].name);
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
        if (!rc_mul_u64(nelem, (uint64_t)t->shape[i], &nelem))
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

/* Validate the header of an already-mapped file and append its tensors. */
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
    rc_st_tensor *local = NULL;
    rc_status s = rc_calloc((void **)&local, (int64_t)count + 1, sizeof *local, path);
    if (s != RC_OK) {
        json_decref(root);
        return s;
    }
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
        /* append to st->tensors, rejecting names seen in earlier shards */
        for (size_t i = 0; i < count && s == RC_OK; i++)
            if (rc_st_find(st, local[i].name))
                s = rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\" also appears in %s", path, local[i].name,
                              rc_st_path_of(st, rc_st_find(st, local[i].name)));
        if (s == RC_OK) {
            rc_st_tensor *grown = realloc(st->tensors, (size_t)(st->ntensors + (int64_t)count + 1) *
                                                           sizeof *grown);
            if (!grown) {
                s = rc_errorf(RC_ERR_NOMEM, "%s: out of memory", path);
            } else {
                st->tensors = grown;
                memcpy(st->tensors + st->ntensors, local, count * sizeof *local);
                st->ntensors += (int64_t)count;
                qsort(st->tensors, (size_t)st->ntensors, sizeof *st->tensors, cmp_name);
                free(local);
                return RC_OK;
            }
        }
    }
    for (size_t i = 0; i < count; i++)
        free(local[i].name);
    free(local);
    return s;
}

static rc_status st_map_file(rc_safetensors *st, const char *path)
{
    rc_st_file *grown = realloc(st->files, (size_t)(st->nfiles + 1) * sizeof *grown);
    if (!grown)
        return rc_errorf(RC_ERR_NOMEM, "%s: out of memory", path);
    st->files = grown;
    rc_st_file *f = &st->files[st->nfiles];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        return rc_errorf(RC_ERR_NOMEM, "%s: out of memory", path);
    st->nfiles++;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block */
    if (fd < 0)
        return rc_errorf(RC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return rc_errorf(RC_ERR_IO, "%s: not a regular file", path);
    }
    f->size = (size_t)sb.st_size;
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
    if (s != RC_OK) {
        rc_st_close(st);
        return s;
    }
    *out = st;
    return RC_OK;
}

static bool has_dotdot_component(const char *p)
{
    for (const char *c = p; (c = strstr(c, "..")) != NULL; c += 2)
        if ((c == p || c[-1] == '/') && (c[2] == '\0' || c[2] == '/'))
            return true;
    return false;
}

/* A shard named in the index must be a plain file inside the model folder.
 * *full_out gets its resolved (realpath) location. */
static rc_status check_shard_path(const char *index_path, const char *dir, const char *rdir,
                                  const char *shard, char **full_out)
{
    *full_out = NULL;
    if (shard[0] == '\0' || shard[0] == '/' || has_dotdot_component(shard))
        return rc_errorf(RC_ERR_FORMAT, "%s: shard path \"%s\" leaves the model folder", index_path,
                         shard);
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
    const char *name;
    json_t *v;
    char rdir[PATH_MAX];
    if (!realpath(dir, rdir)) {
        json_decref(root);
        return rc_errorf(RC_ERR_IO, "%s: cannot resolve: %s", dir, strerror(errno));
    }
    /* open every distinct shard once, in order of first appearance */
    json_object_foreach(wm, name, v)
    {
        if (!json_is_string(v)) {
            s = rc_errorf(RC_ERR_FORMAT, "%s: weight_map[\"%s\"] is not a string", index_path, name);
            break;
        }
        const char *shard = json_string_value(v);
        char *full;
        s = check_shard_path(index_path, dir, rdir, shard, &full);
        if (s != RC_OK)
            break;
        int seen = 0;
        for (int i = 0; i < st->nfiles && !seen; i++)
            seen = strcmp(st->files[i].path, full) == 0;
        if (!seen)
            s = st_map_file(st, full);
        free(full);
        if (s != RC_OK)
            break;
    }
    /* every mapped tensor must be in the shard the index names */
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
            char *full;
            s = check_shard_path(index_path, dir, rdir, shard, &full);
            if (s != RC_OK)
                break;
            bool same = strcmp(st->files[t->file].path, full) == 0;
            free(full);
            if (!same) {
                s = rc_errorf(RC_ERR_FORMAT, "%s: tensor \"%s\" is listed for %s but found in %s",
                              index_path, name, shard, st->files[t->file].path);
                break;
            }
        }
    }
    json_decref(root);
    return s;
}

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
    else if (rc_file_exists(single))
        s = st_map_file(st, single);
    else
        s = rc_errorf(RC_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", dir);
    free(index);
    free(single);
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

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const rc_st_tensor *)a)->name, ((const rc_st_tensor *)b)->name);
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

rc_status rc_st_read_f32(const rc_safetensors *st, const char *name, int ndim,
                         const int64_t *shape, float *dst)
{
    const rc_st_tensor *t;
    RC_TRY(check_tensor(st, name, ndim, shape, &t, "F32/F16/BF16/F64"));
    int64_t n;
    rc_numel(t->shape, t->ndim, &n);
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case RC_F32:
        memcpy(dst, p, (size_t)n * 4);
        break;
    case RC_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = rc_f16_to_f32(h);
        }
        break;
    case RC_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = rc_bf16_to_f32(h);
        }
        break;
    case RC_F64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        }
        break;
    default: {
        char got[128];
        return rc_errorf(RC_ERR_UNSUPPORTED, "%s: tensor \"%s\" has dtype %s %s, expected F32, F16, BF16 or F64",
                         rc_st_path_of(st, t), name, t->dtype_name,
                         rc_st_shape_str(got, sizeof got, t->ndim, t->shape));
    }
    }
    return RC_OK;
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
