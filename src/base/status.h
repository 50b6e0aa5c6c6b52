/* Status codes returned by every library function, and the one-line error
 * message that goes with the last failure on this thread.
 *
 * Library code never exits: it returns an rc_status and, on failure, records a
 * message with rc_errorf(). main() prints rc_last_error() and exits with
 * rc_exit_code(status). The mapping to exit codes is documented in README.md.
 */
#ifndef RC_STATUS_H
#define RC_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RC_OK = 0,
    RC_ERR_USAGE,       /* bad command line                        -> exit 2 */
    RC_ERR_GATE,        /* a gate failed (--fail-above, --fail-on)  -> exit 3 */
    RC_ERR_FORMAT,      /* malformed input file (json, safetensors) -> exit 4 */
    RC_ERR_UNSUPPORTED, /* valid input we do not support            -> exit 5 */
    RC_ERR_IO,          /* cannot open / read / write a file        -> exit 6 */
    RC_ERR_NOMEM,       /* allocation failed or size too large      -> exit 7 */
    RC_ERR_DEVICE,      /* GPU backend unavailable or failed        -> exit 8 */
    RC_ERR_INTERNAL,    /* a bug: an invariant did not hold         -> exit 1 */
    RC_ERR_INTERRUPTED, /* SIGINT / SIGTERM                         -> exit 130 */
} rc_status;

/* Record a printf-style message for the current failure and return `st`. */
rc_status rc_errorf(rc_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefix the current message with "prefix: " (used to add a file name). */
rc_status rc_error_prefix(rc_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

const char *rc_last_error(void);
void rc_clear_error(void);
const char *rc_status_name(rc_status st);
int rc_exit_code(rc_status st);

#ifdef __cplusplus
}
#endif

#define RC_TRY(expr)                         \
    do {                                     \
        rc_status rc_try_st_ = (expr);       \
        if (rc_try_st_ != RC_OK)             \
            return rc_try_st_;               \
    } while (0)

/* Length (1..4) of the well-formed UTF-8 sequence at s, or 0 when the bytes
 * there are not UTF-8 (RFC 3629). Never reads past a NUL. */
int rc_utf8_seq_len(const unsigned char *s);

#endif
