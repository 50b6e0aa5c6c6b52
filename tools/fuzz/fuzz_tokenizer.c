/* libFuzzer harness: a whole tokenizer.json -> rc_tokenizer_load; when it
 * loads, rc_tokenizer_encode on fixed strings and on pieces of the input
 * itself (with and without special tokens), and rc_tokenizer_decode of the
 * ids and of ids taken from the input bytes.
 *
 * Checked: every encoded id has a vocabulary string; decode gives valid
 * UTF-8 of the length it reports; with FUZZ_CHECK_MSG=1 every error is one
 * line naming tokenizer.json. Errors (malformed, unsupported, a resource
 * limit) are fine; crashes, leaks, UB, timeouts and out-of-memory are
 * findings. Run with -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10.
 * Seeds: tools/fuzz/corpus/tokenizer/ (small hand-made files covering each
 * component, and small fixtures of data/fixtures/tokenizers).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "json_util.h"
#include "tokenizer.h"

static const char *const k_keys[] = {
    "type", "normalizer", "normalizers", "pre_tokenizer", "pretokenizers", "post_processor", "processors",
    "decoder", "decoders", "model", "vocab", "merges", "added_tokens", "pattern", "Regex", "String", "content",
    "behavior", "invert", "replacement", "prepend_scheme", "add_prefix_space", "split", "use_regex", "prepend",
    "cls", "sep", "single", "special_tokens", "ids", "SpecialToken", "Sequence", "id", "special", "lstrip",
    "rstrip", "single_word", "byte_fallback", "fuse_unk", "ignore_merges", "unk_token", "dropout", "start",
    "stop", "continuing_subword_prefix", "end_of_word_suffix", NULL};
static const char *const k_strings[] = {
    "Sequence", "NFC", "NFD", "NFKC", "NFKD", "Prepend", "Replace", "ByteLevel", "Split", "Metaspace", "BPE",
    "TemplateProcessing", "RobertaProcessing", "BertProcessing", "ByteFallback", "Fuse", "Strip", "Isolated",
    "Removed", "MergedWithPrevious", "MergedWithNext", "always", "first", "never", "\xe2\x96\x81", " ", "a", "ab",
    "", "<s>", "<0x41>", "(a+)+b|!", "(?:ab)+", "\\s+(?!\\S)|\\s+", "\\p{L}+|\\p{N}", "(?<=a)", "\\K", "\\G",
    "aaaaaaaaaaaaaaaa", "\xef\xb7\xba", NULL};
static const fz_json_dict k_dict = {k_keys, k_strings};

static char g_path[600];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(g_path, sizeof g_path, "%s/tokenizer.json", fz_scratch_dir("tokenizer"));
    return 0;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    return fz_json_mutate(data, size, max_size, seed, &k_dict);
}

static void check_decode(const rc_tokenizer *t, const int32_t *ids, int64_t n, bool skip)
{
    char *out = NULL;
    size_t len = 0;
    rc_status s = rc_tokenizer_decode(t, ids, n, skip, &out, &len);
    fz_check_msg(s, "tokenizer.json");
    if (s != RC_OK) {
        if (out)
            abort();
        return;
    }
    if (!out || strlen(out) > len || out[len] != '\0' || !rc_utf8_valid((const unsigned char *)out, len, NULL)) {
        fprintf(stderr, "decode gave %zu bytes that are not valid NUL-terminated UTF-8\n", len);
        abort();
    }
    free(out);
}

static void check_encode(const rc_tokenizer *t, const char *s, size_t n)
{
    for (int special = 0; special < 2; special++) {
        int32_t *ids = NULL;
        int64_t nid = -1;
        rc_status st = rc_tokenizer_encode(t, s, n, special, &ids, &nid);
        if (st != RC_OK) {
            /* invalid UTF-8 in the text is named by byte offset, the rest by the file */
            if (rc_utf8_valid((const unsigned char *)s, n, NULL))
                fz_check_msg(st, "tokenizer.json");
            if (ids)
                abort();
            continue;
        }
        if (!ids || nid < 0)
            abort();
        for (int64_t i = 0; i < nid; i++)
            if (!rc_tokenizer_piece(t, ids[i])) {
                fprintf(stderr, "encode gave id %d, which has no vocabulary string\n", ids[i]);
                abort();
            }
        check_decode(t, ids, nid, special);
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write(g_path, data, size);
    rc_tokenizer *t = NULL;
    rc_status s = rc_tokenizer_load(g_path, 0, &t);
    fz_check_msg(s, "tokenizer.json");
    if (s != RC_OK) {
        if (t)
            abort();
        return 0;
    }
    static const char *const texts[] = {
        "Hello world", "  In the beginning\n\nGod created   the heaven.  ", "it's 12345 o'clock; we'll've",
        "\xc3\xa9t\xc3\xa9 na\xc3\xafve e\xcc\x81 \xef\xb7\xba \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80",
        "<s>a</s><0x41> aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!", "ababababababababc", "\t\r\n \xe2\x96\x81x", "", "a"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        check_encode(t, texts[i], strlen(texts[i]));
    /* pieces of the input: its vocabulary and patterns make good text */
    size_t cut = size < 200 ? size : 200;
    check_encode(t, (const char *)data, cut);
    if (size > 400)
        check_encode(t, (const char *)data + size / 2, 200);
    /* ids from the input bytes, including ones that are not tokens */
    int64_t V = rc_tokenizer_vocab_size(t);
    int32_t ids[64];
    int64_t n = 0;
    for (size_t i = 0; i + 1 < size && n < 64; i += 7)
        ids[n++] = (int32_t)(((uint32_t)data[i] << 8 | data[i + 1]) % (uint32_t)(V + 3));
    check_decode(t, ids, n, false);
    check_decode(t, ids, n, true);
    rc_tokenizer_free(t);
    return 0;
}
