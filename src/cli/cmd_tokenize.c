/* ratiocheck tokenize: token ids and pieces of a text. */
#include "cli.h"

/* ---- tokenize ------------------------------------------------------------- */

typedef struct {
    const char *model, *file;
    bool json, special, help;
} tokenize_opts;

static const opt_spec k_tokenize_opts[] = {
    {"model", 'm', "DIR", "model folder (or a folder with only tokenizer.json) (required)", NULL, op_path,
     offsetof(tokenize_opts, model), 0, 0, 0, 0, 0},
    {"add-special", 0, NULL, "add the special tokens the tokenizer's post-processor adds", NULL, op_flag,
     offsetof(tokenize_opts, special), 0, 0, 0, 0, 0},
    {"json", 0, NULL, "print JSON (ids and pieces)", NULL, op_flag, offsetof(tokenize_opts, json), 0, 0, 0, 0, 0},
    {"file", 0, "FILE", "encode the whole file: token count and encode speed", NULL, op_path,
     offsetof(tokenize_opts, file), 0, 0, 0, 0, 0},
    OPT_HELP(tokenize_opts),
};

int cmd_tokenize(int argc, char **argv, const char *cmdline)
{
    tokenize_opts to = {0};
    int done = parse_opts(argc, argv, k_tokenize_opts, sizeof k_tokenize_opts / sizeof k_tokenize_opts[0], &to,
                          offsetof(tokenize_opts, help),
                          "Usage: ratiocheck tokenize --model DIR [--add-special] [--json] TEXT...\n"
                          "       ratiocheck tokenize --model DIR --file FILE   (token count and encode speed)\n\n");
    if (done >= 0)
        return done;
    const char *model = to.model, *file = to.file;
    const int json = to.json, special = to.special;
    if (!model)
        return usage_error("%s: --model DIR is required", "tokenize");
    if (optind >= argc && !file)
        return usage_error("%s: no text given", "tokenize");
    /* a model folder (ids checked against its vocab_size) or a folder with
     * only tokenizer.json */
    char *path = rc_path_join(model, "tokenizer.json");
    char *cpath = rc_path_join(model, "config.json");
    rc_config cfg;
    cfg.vocab = 0;
    rc_status st = path && cpath ? RC_OK : rc_errorf(RC_ERR_NOMEM, "out of memory");
    if (st == RC_OK)
        st = rc_model_dir_check(model);
    bool have_cfg = false;
    if (st == RC_OK)
        st = optional_file(cpath, &have_cfg);
    if (st == RC_OK && have_cfg)
        st = rc_config_load(model, &cfg);
    rc_tokenizer *tok = NULL;
    if (st == RC_OK)
        st = rc_tokenizer_load(path, cfg.vocab, &tok);
    free(path);
    free(cpath);
    if (st != RC_OK)
        return fail(st);
    int code = 0;
    if (file) { /* the whole file in one call, timed */
        char *buf;
        size_t len;
        st = rc_read_file(file, &buf, &len, (size_t)1 << 31);
        if (st == RC_OK) {
            int32_t *ids;
            int64_t n;
            double t0 = mono_now();
            st = rc_tokenizer_encode(tok, buf, len, special, &ids, &n);
            double dt = mono_now() - t0;
            if (st == RC_OK) {
                printf("%s: %zu bytes, %lld tokens, %.3f s, %.2f MB/s\n", file, len, (long long)n, dt,
                       (double)len / 1e6 / dt);
                free(ids);
            }
            free(buf);
        }
        if (st != RC_OK)
            code = fail(st);
    }
    for (int a = optind; a < argc && code == 0; a++) {
        int32_t *ids;
        int64_t n;
        st = rc_tokenizer_encode(tok, argv[a], strlen(argv[a]), special, &ids, &n);
        if (st != RC_OK) {
            code = fail(st);
            break;
        }
        if (json) {
            printf("{\"text\": ");
            rc_json_str(stdout, argv[a]);
            printf(", \"ids\": [");
            for (int64_t i = 0; i < n; i++)
                printf("%s%d", i ? ", " : "", ids[i]);
            printf("], \"pieces\": [");
            for (int64_t i = 0; i < n; i++) {
                printf("%s", i ? ", " : "");
                rc_json_str(stdout, rc_tokenizer_piece(tok, ids[i]));
            }
            printf("]}\n");
        } else {
            for (int64_t i = 0; i < n; i++)
                printf("%s%d", i ? " " : "", ids[i]);
            printf("\n");
            for (int64_t i = 0; i < n; i++) {
                printf("%s", i ? " " : "");
                rc_json_str(stdout, rc_tokenizer_piece(tok, ids[i]));
            }
            printf("\n");
        }
        free(ids);
    }
    rc_tokenizer_free(tok);
    return code;
}
