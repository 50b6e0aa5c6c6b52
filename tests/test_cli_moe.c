/* The CLI on mixture-of-experts fixtures (docs/routing.md, docs/verdict.md):
 * the verdict's routing line and its gate where routing really flips, and
 * the sweep's rows carrying the routing and distribution numbers a single
 * run writes. */
#include <check.h>
#include <hdf5.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "routing.h"
#include "test_cli.h"
#include "testutil.h"

/* 16 prompts of 8 ids below the fixtures' vocabularies (docs/routing.md's moe.ids) */
static void write_moe_ids(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/moe.ids", g_dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++)
            fprintf(f, "%d%c", 3 + (i * 37 + j * 11) % 257, j == 7 ? '\n' : ' ');
    fclose(f);
}

/* g_dir/k1: the qwen3_moe fixture (tools/fixtures, transformers' Qwen3MoeForCausalLM) with
 * num_experts_per_tok 1: its weights, routed to one expert per token, so that every flip leaves the two
 * sides with no expert in common (what miles' check counts) */
static void make_top1_fixture(void)
{
    char src[4096], dst[256], cmd[3 * 4096 + 512];
    rc_test_source_path(src, sizeof src, "data/fixtures/qwen3_moe");
    snprintf(dst, sizeof dst, "%s/k1", g_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && ln -s '%s'/model.safetensors '%s'/generation_config.json '%s'/", dst,
             src, src, dst);
    ck_assert_int_eq(system(cmd), 0);
    char p[4352];
    snprintf(p, sizeof p, "%s/config.json", src);
    static char cfg[1 << 16];
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    const size_t n = fread(cfg, 1, sizeof cfg - 1, f);
    fclose(f);
    cfg[n] = '\0';
    char *k = strstr(cfg, "\"num_experts_per_tok\": 3,");
    ck_assert_ptr_nonnull(k);
    k[strlen("\"num_experts_per_tok\": ")] = '1';
    snprintf(p, sizeof p, "%s/config.json", dst);
    f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(cfg, 1, n, f), n);
    fclose(f);
}

/* miles' share recomputed from a results file's /routing experts over the generated tokens t < tmax: per MoE
 * layer the valid tokens whose two sets share no expert, the largest over the layers, over the valid tokens;
 * *flip_share: tokens whose sets differ in some layer */
static double file_miles_share(const char *path, hsize_t tmax, double *flip_share)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    int16_t *e[2] = {NULL, NULL};
    hsize_t d[4];
    for (int side = 0; side < 2; side++) {
        hid_t ds = H5Dopen2(f, side ? "/routing/trainer_experts" : "/routing/sampler_experts", H5P_DEFAULT);
        ck_assert(ds >= 0);
        hid_t sp = H5Dget_space(ds);
        ck_assert_int_eq(H5Sget_simple_extent_dims(sp, d, NULL), 4);
        e[side] = malloc(d[0] * d[1] * d[2] * d[3] * sizeof(int16_t));
        ck_assert_ptr_nonnull(e[side]);
        ck_assert(H5Dread(ds, H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, e[side]) >= 0);
        H5Sclose(sp);
        H5Dclose(ds);
    }
    H5Fclose(f);
    const hsize_t tok = d[0] * d[1], Lm = d[2], k = d[3];
    int64_t valid = 0, flipped = 0, worst = 0;
    int64_t *none = calloc(Lm, sizeof *none);
    for (hsize_t i = 0; i < tok; i++) {
        if (i % d[1] >= tmax || e[0][i * Lm * k] < 0 || e[1][i * Lm * k] < 0)
            continue;
        valid++;
        bool flip = false;
        for (hsize_t m = 0; m < Lm; m++) {
            const int16_t *a = e[0] + (i * Lm + m) * k, *b = e[1] + (i * Lm + m) * k;
            hsize_t common = 0;
            for (hsize_t x = 0; x < k; x++)
                for (hsize_t y = 0; y < k; y++)
                    common += a[x] == b[y];
            none[m] += common == 0;
            flip = flip || common < k;
        }
        flipped += flip;
    }
    for (hsize_t m = 0; m < Lm; m++)
        worst = none[m] > worst ? none[m] : worst;
    free(none);
    free(e[0]);
    free(e[1]);
    ck_assert_int_gt(valid, 0);
    *flip_share = (double)flipped / (double)valid;
    return (double)worst / (double)valid;
}

static int level_of(const json_t *verdict, const char *obj)
{
    const char *l = json_string_value(json_object_get(json_object_get(verdict, obj), "level"));
    ck_assert_msg(l != NULL, "verdict.%s missing", obj);
    return !strcmp(l, "OK") ? 0 : !strcmp(l, "WARN") ? 1 : !strcmp(l, "FAIL") ? 2 : -1;
}

/* The routing line where routing really flips (top-1 routing: the sampler's router precision or the
 * trainer's dtype moves a token's expert): its level from the file's own expert record against miles' 1%,
 * on both sides of it; --fail-above verdict.routing gates on that line alone, --fail-on on every line */
START_TEST(test_routing_fail_on)
{
    write_moe_ids();
    make_top1_fixture();
    static const char *const sides[][2] = {
        {"dtype=fp32", "dtype=fp32"},             /* the same router: no flip */
        {"dtype=bf16,router=fp32", "dtype=bf16"}, /* the sampler's router in fp32, the trainer's in bf16 */
        {"dtype=bf16", "dtype=fp32"},             /* a bf16 sampler against an fp32 trainer */
        {"dtype=fp16", "dtype=fp32"},
    };
    int seen_ok_flips = 0, seen_warn = 0;
    for (size_t c = 0; c < sizeof sides / sizeof sides[0]; c++) {
        char base[2048], args[2304], path[128];
        snprintf(path, sizeof path, "%s/moe%zu.h5", g_dir, c);
        snprintf(base, sizeof base,
                 "--model %s/k1 --prompts %s/moe.ids --samples 2 --len 16,32 --backend cpu -q --sampler %s "
                 "--trainer %s",
                 g_dir, g_dir, sides[c][0], sides[c][1]);
        snprintf(args, sizeof args, "%s --out %s --json", base, path);
        ck_assert_int_eq(run(args), 0);
        json_error_t err;
        json_t *j = json_loads(g_out, 0, &err);
        ck_assert_msg(j != NULL, "%s", err.text);
        const json_t *v = json_object_get(j, "verdict");
        double flips, f16;
        const double share = file_miles_share(path, 32, &flips), s16 = file_miles_share(path, 16, &f16);
        const bool warn = share > RC_ROUTING_MILES_MAX;
        const int lr = level_of(v, "routing");
        ck_assert_msg(lr == (warn ? 1 : 0), "%s / %s: routing %d, miles %.6g", sides[c][0], sides[c][1], lr,
                      share);
        ck_assert(json_number_value(json_object_get(json_object_get(j, "routing"), "miles_mismatch")) == share);
        int worst = lr;
        static const char *const objs[] = {"token_ppo", "sequence_is", "gspo"};
        for (int o = 0; o < 3; o++) {
            const int l = level_of(v, objs[o]);
            worst = l > worst ? l : worst;
        }
        json_decref(j);
        seen_warn += warn;
        seen_ok_flips += !warn && flips > 0;
        /* the routing line alone */
        snprintf(args, sizeof args, "%s --out none --fail-above verdict.routing=0", base);
        ck_assert_int_eq(run(args), warn ? 3 : 0);
        if (warn)
            ck_assert_msg(strstr(g_err, "verdict.routing = 1 exceeds 0"), "%s", g_err);
        /* every line, the routing one among them */
        snprintf(args, sizeof args, "%s --out none --fail-on warn", base);
        ck_assert_int_eq(run(args), worst >= 1 ? 3 : 0);
        if (warn)
            ck_assert_msg(strstr(g_err, "--fail-on warn: routing is WARN: "), "%s", g_err);
        snprintf(args, sizeof args, "%s --out none --fail-on fail", base);
        ck_assert_int_eq(run(args), worst >= 2 ? 3 : 0);
        /* the share as a metric of each length (the tokens t < L): the largest over the lengths holds, just
         * below it fails */
        const double mx = fmax(share, s16);
        snprintf(args, sizeof args, "%s --out none --fail-above routing_miles_mismatch=%.17g", base, mx);
        ck_assert_int_eq(run(args), 0);
        snprintf(args, sizeof args, "%s --out none --fail-above routing_miles_mismatch=%.17g", base,
                 mx > 0 ? mx * (1 - 1e-9) : -1e-9);
        ck_assert_int_eq(run(args), 3);
    }
    ck_assert_int_gt(seen_warn, 0);     /* above miles' 1% */
    ck_assert_int_gt(seen_ok_flips, 0); /* flips, but at most 1% of a layer's tokens with no expert in common */
    /* a dense model has no routing line: a routing metric is refused at the gate, naming why */
    char args[2048];
    snprintf(args, sizeof args, "%s --out none --fail-above routing_share_flip=1", g_common);
    ck_assert_int_eq(run(args), 3);
    ck_assert_msg(strstr(g_err, "has no routing record"), "%s", g_err);
    snprintf(args, sizeof args, "%s --out none --kernels invariant --fail-on warn --fail-above verdict.routing=0",
             g_common);
    ck_assert_int_eq(run(args), 0);
}
END_TEST

/* every numeric attribute of a group, as raw bytes (doubles and int64 alike), by name */
typedef struct {
    int n;
    char name[128][64];
    unsigned char v[128][8];
} attr_set;

static herr_t attr_collect(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
    (void)info;
    attr_set *s = data;
    ck_assert_int_lt(s->n, 128);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT), t = H5Aget_type(a);
    ck_assert(a >= 0);
    const H5T_class_t cls = H5Tget_class(t);
    if (cls != H5T_FLOAT && cls != H5T_INTEGER) { /* the numbers only */
        H5Tclose(t);
        H5Aclose(a);
        return 0;
    }
    snprintf(s->name[s->n], sizeof s->name[0], "%s", name);
    ck_assert(H5Aread(a, cls == H5T_FLOAT ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64, s->v[s->n]) >= 0);
    s->n++;
    H5Tclose(t);
    H5Aclose(a);
    return 0;
}

static void read_attrs(const char *path, const char *group, attr_set *s)
{
    memset(s, 0, sizeof *s);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    ck_assert_msg(g >= 0, "%s: no %s", path, group);
    ck_assert(H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, NULL, attr_collect, s) >= 0);
    H5Gclose(g);
    H5Fclose(f);
}

static void read_str_attr(const char *path, const char *group, const char *name, char *buf, size_t n)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    hid_t a = H5Aopen(g, name, H5P_DEFAULT), t = H5Aget_type(a);
    ck_assert(a >= 0);
    ck_assert(H5Tis_variable_str(t) > 0);
    char *s = NULL;
    ck_assert(H5Aread(a, t, &s) >= 0);
    snprintf(buf, n, "%s", s);
    H5free_memory(s);
    H5Tclose(t);
    H5Aclose(a);
    H5Gclose(g);
    H5Fclose(f);
}

/* The sweep's rows carry the routing and distribution numbers a single run writes: a trainer-only setting
 * (the sampler's rollouts unchanged) replayed in the sweep gives, at every length, the same attributes,
 * bit for bit, as a single run with that trainer, in the HDF5 file and in the JSON */
START_TEST(test_sweep_routing_rows)
{
    write_moe_ids();
    char args[2048], sw[128], one[128];
    snprintf(sw, sizeof sw, "%s/sw.h5", g_dir);
    snprintf(one, sizeof one, "%s/one.h5", g_dir);
    const char *common = "--model data/fixtures/qwen3_moe --samples 2 --len 16,32 --backend cpu -q --distribution";
    snprintf(args, sizeof args,
             "sweep %s --prompts %s/moe.ids --sampler dtype=bf16 --trainer dtype=fp32 --vary trainer:routing=replay "
             "--vary both:router=fp32 --out %s --json",
             common, g_dir, sw);
    ck_assert_int_eq(run(args), 0);
    json_error_t err;
    json_t *js = json_loads(g_out, 0, &err);
    ck_assert_msg(js != NULL, "%s", err.text);
    snprintf(args, sizeof args,
             "run %s --prompts %s/moe.ids --sampler dtype=bf16 --trainer dtype=fp32,routing=replay --out %s --json",
             common, g_dir, one);
    ck_assert_int_eq(run(args), 0);
    json_t *j1 = json_loads(g_out, 0, &err);
    ck_assert_msg(j1 != NULL, "%s", err.text);
    char name[96];
    read_str_attr(sw, "/sweep/01", "name", name, sizeof name);
    ck_assert_str_eq(name, "trainer: routing=replay");
    static const int lens[] = {16, 32};
    for (int l = 0; l < 2; l++) {
        char grp[64];
        attr_set a, b;
        snprintf(grp, sizeof grp, "/sweep/01/len_%04d", lens[l]);
        read_attrs(sw, grp, &a);
        snprintf(grp, sizeof grp, "/len_%04d", lens[l]);
        read_attrs(one, grp, &b);
        ck_assert_int_eq(a.n, b.n);
        int routing = 0, dist = 0;
        for (int i = 0; i < a.n; i++) {
            ck_assert_str_eq(a.name[i], b.name[i]);
            ck_assert_msg(!memcmp(a.v[i], b.v[i], 8), "L=%d %s differs between the sweep's row and the run",
                          lens[l], a.name[i]);
            routing += !strncmp(a.name[i], "routing_", 8);
            dist += !strncmp(a.name[i], "kl_", 3) || !strncmp(a.name[i], "tv_", 3) || !strcmp(a.name[i], "top1_agree") ||
                    !strcmp(a.name[i], "dist_count");
        }
        ck_assert_int_eq(routing, 11); /* every routing row of the statistics' table */
        ck_assert_int_eq(dist, 10);    /* every distribution row */
    }
    /* the record's statistics at the longest length are the length's */
    attr_set r1, l32;
    read_attrs(one, "/routing", &r1);
    read_attrs(one, "/len_0032", &l32);
    int matched = 0;
    for (int i = 0; i < r1.n; i++)
        for (int k = 0; k < l32.n; k++)
            if (!strncmp(l32.name[k], "routing_", 8) && !strcmp(l32.name[k] + 8, r1.name[i])) {
                ck_assert_msg(!memcmp(r1.v[i], l32.v[k], 8), "/routing %s", r1.name[i]);
                matched++;
            }
    ck_assert_int_eq(matched, 11);
    /* the JSON: the sweep's row at the longest length against the run's longest length, every routing and
     * distribution key the run prints */
    const json_t *rows = json_object_get(json_object_get(js, "sweep"), "rows");
    const json_t *row = json_array_get(rows, 1);
    ck_assert_str_eq(json_string_value(json_object_get(row, "setting")), "trainer: routing=replay");
    const json_t *l1 = json_array_get(json_object_get(j1, "lens"), 1);
    int keys = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)l1, key, val)
    {
        if (strncmp(key, "routing_", 8) && strncmp(key, "kl_", 3) && strncmp(key, "tv_", 3) &&
            strcmp(key, "top1_agree") && strcmp(key, "dist_count"))
            continue;
        const json_t *x = json_object_get(row, key);
        ck_assert_msg(x != NULL, "the sweep's row has no %s", key);
        ck_assert_msg(json_number_value(x) == json_number_value(val) || (json_is_null(x) && json_is_null(val)),
                      "%s: %.17g vs %.17g", key, json_number_value(x), json_number_value(val));
        keys++;
    }
    ck_assert_int_eq(keys, 21);
    json_decref(js);
    json_decref(j1);
    /* the table names the columns */
    snprintf(args, sizeof args, "sweep %s --prompts %s/moe.ids --trainer dtype=fp32 --vary trainer:routing=replay --out none",
             common, g_dir);
    ck_assert_int_eq(run(args), 0);
    ck_assert_msg(strstr(g_out, "KL mean") && strstr(g_out, "flips") && strstr(g_out, "no common"), "%s", g_out);
}
END_TEST

void moe_tests_in_run(TCase *tc)
{
    tcase_add_test(tc, test_routing_fail_on);
    tcase_add_test(tc, test_sweep_routing_rows);
}
