/* jansson helpers: strict loading (duplicate keys rejected) and typed field
 * access with one-line errors that name the file and the key. */
#ifndef RC_JSON_UTIL_H
#define RC_JSON_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "status.h"

/* Parse a JSON buffer; the top level must be an object. `what` names the
 * source (file path) in errors. */
rc_status rc_json_parse_object(const char *buf, size_t len, const char *what, json_t **out);
/* Read and parse a JSON file (size-capped); the top level must be an object. */
rc_status rc_json_load_object(const char *path, size_t max_len, json_t **out);
/* the same with extra jansson decoding flags, e.g. JSON_DECODE_INT_AS_REAL for
 * files Python's json writes with integers beyond 64 bits (transformers'
 * tokenizer_config.json: "model_max_length": 1000000000000000019884624838656) */
rc_status rc_json_parse_object_flags(const char *buf, size_t len, const char *what, size_t flags, json_t **out);
rc_status rc_json_load_object_flags(const char *path, size_t max_len, size_t flags, json_t **out);

/* Typed getters. Absent key (or JSON null when null_is_absent) -> *present=false
 * and the default is stored. Wrong type / out of range -> RC_ERR_FORMAT naming
 * file and key. `present` may be NULL. */
rc_status rc_json_get_int(const json_t *obj, const char *key, const char *file, int64_t min,
                          int64_t max, int64_t def, int64_t *out, bool *present);
rc_status rc_json_get_num(const json_t *obj, const char *key, const char *file, double min,
                          double max, double def, double *out, bool *present);
rc_status rc_json_get_bool(const json_t *obj, const char *key, const char *file, bool def,
                           bool *out, bool *present);
/* String getter: returns a pointer into the json object (valid while it lives). */
rc_status rc_json_get_str(const json_t *obj, const char *key, const char *file, const char *def,
                          const char **out, bool *present);

/* True when s (len bytes) is valid UTF-8 (no overlongs, no surrogates). On
 * failure *bad_at gets the offset where the first invalid sequence starts. */
bool rc_utf8_valid(const unsigned char *s, size_t len, size_t *bad_at);

#endif
