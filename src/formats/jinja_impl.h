/* A Jinja subset interpreter for chat templates (jinja.h): its shared parts.
 *
 * Lexing follows jinja2 3.1's lexer as transformers configures it:
 * trim_blocks (one newline after a block or comment tag is dropped),
 * lstrip_blocks (spaces and tabs from the start of a line to a block or
 * comment tag are dropped, unless the tag opens with "+"), "-" on either side
 * of a tag strips all whitespace on that side, one trailing newline of the
 * template is dropped (keep_trailing_newline off). Whitespace is Python's
 * (str.isspace, the re module's \s).
 *
 * The parser builds a tree in an arena owned by the template; rendering
 * evaluates it with values in an arena of its own (bounded by
 * RC_JINJA_MAX_MEMORY), counting steps (RC_JINJA_MAX_STEPS). Values follow
 * Python's semantics where templates can see them: str is UTF-8 with lengths,
 * indices and slices in code points; int is 64-bit (overflow is an error);
 * float is double with Python's repr; lists and dicts print as Python's repr;
 * undefined values print as "" and fail in arithmetic and attribute access,
 * as jinja2's default Undefined does.
 *
 * This header holds the arena, tokens, the tree, the subset's names, values
 * and the evaluation context, and the functions the interpreter's files call
 * across: jinja_lex.c (arena, Python's whitespace and UTF-8, lexer),
 * jinja_parse.c (parser, rc_jinja_parse), jinja_value.c (values, their text
 * and JSON, variables, string helpers), jinja_call.c (items, attributes,
 * methods, functions, tests, filters), jinja_eval.c (operators, expressions,
 * statements, rc_jinja_render). Internal to src/formats/. */
#ifndef RC_JINJA_IMPL_H
#define RC_JINJA_IMPL_H

#include "jinja.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "json_util.h"

/* ======================================================================== */
/* arena                                                                    */
/* ======================================================================== */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[];
} chunk;

typedef struct {
    chunk *head;
    size_t total, max;
    bool over, capped; /* capped: over the limit (not out of memory) */
} arena;

/* ======================================================================== */
/* tokens                                                                   */
/* ======================================================================== */

typedef enum { T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF } tkind;

typedef struct {
    tkind k;
    int line;
    const char *p; /* DATA / STR: the (decoded) text in the arena; NAME / OP / INT / FLOAT: the source */
    size_t n;
    int64_t i;
    double f;
} tok;

/* ======================================================================== */
/* tree                                                                     */
/* ======================================================================== */

typedef enum {
    /* statements */
    S_BODY,
    S_TEXT,
    S_OUT,
    S_IF,
    S_FOR,
    S_SET,
    S_SETBLOCK,
    S_BREAK,
    S_CONTINUE,
    S_GENERATION,
    S_MACRO, /* s: the name; kids: the parameters (E_NAME, or E_KWARG with its default in a); c: the body */
    /* expressions */
    E_LIT,
    E_NAME,
    E_LIST,
    E_TUPLE,
    E_DICT,
    E_ATTR,
    E_ITEM,
    E_SLICE,
    E_CALL,
    E_KWARG,
    E_FILTER,
    E_TEST,
    E_NOT,
    E_NEG,
    E_POS,
    E_AND,
    E_OR,
    E_BIN,
    E_CONCAT,
    E_COMPARE,
    E_COND,
    E_NONE_ARG /* an absent slice bound */
} nkind;

enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW };
enum { CMP_EQ = 1, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

struct jv;
typedef struct node {
    uint8_t k;
    uint8_t op;
    bool neg; /* E_TEST: is not */
    int line;
    const char *s; /* NAME / ATTR / FILTER / TEST / KWARG name; TEXT / string literal */
    size_t sn;
    int id; /* FILTER / TEST / CALL: which one */
    struct node *a, *b, *c;
    struct node **kids; /* BODY statements; IF: cond, body, cond, body, ...; LIST / TUPLE / DICT (k, v, ...) items;
                           CALL / FILTER / TEST arguments; COMPARE: operands (op codes in ops) */
    size_t nk;
    uint8_t *ops;
    /* E_LIT */
    uint8_t lt; /* literal type: 1 str, 2 int, 3 float, 4 bool, 5 none */
    int64_t li;
    double lf;
} node;

struct rc_jinja {
    arena ar;
    node *root;
    const char *what;
    char *what_copy;
    bool fixed_time;
    struct tm tm;
    /* names read */
    const char **names;
    size_t *name_lens;
    size_t nnames, cnames;
};

/* lexer state (jinja_lex.c; rc_jinja_parse starts it) */
typedef struct {
    const char *src;
    size_t len;
    const char *what;
    arena *ar;
    tok *t;
    size_t nt, ct;
    char err[400];
    rc_status st;
    int line, eline;
} lexer;

/* ---- what the subset knows ---- */

static const char *const k_filters[] = {"abs",   "capitalize", "count",   "d",       "default", "first",  "float",
                                        "indent", "int",       "items",   "join",    "last",    "length", "list",
                                        "lower", "map",        "reject",  "rejectattr", "replace", "reverse", "round",
                                        "safe",  "select",     "selectattr", "string", "title",   "tojson", "trim",
                                        "unique", "upper",     "e",       "escape"};
enum {
    F_ABS,
    F_CAPITALIZE,
    F_COUNT,
    F_D,
    F_DEFAULT,
    F_FIRST,
    F_FLOAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_STRING,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
    F_E,
    F_ESCAPE
};
static const char *const k_tests[] = {"boolean", "callable", "defined", "divisibleby", "eq", "equalto", "even",
                                      "false",   "float",    "ge",      "greaterthan", "gt", "in",      "integer",
                                      "iterable", "le",      "lessthan", "lower",      "lt", "mapping", "ne",
                                      "none",    "number",   "odd",     "sameas",      "sequence", "string", "true",
                                      "undefined", "upper",  "==",      "!=",          "<",  "<=",      ">",
                                      ">="};
enum {
    T_BOOLEAN,
    T_CALLABLE,
    T_DEFINED,
    T_DIVISIBLEBY,
    T_EQ,
    T_EQUALTO,
    T_EVEN,
    T_FALSE,
    T_FLOAT_,
    T_GE,
    T_GREATERTHAN,
    T_GT,
    T_IN,
    T_INTEGER,
    T_ITERABLE,
    T_LE,
    T_LESSTHAN,
    T_LOWER,
    T_LT,
    T_MAPPING,
    T_NE,
    T_NONE,
    T_NUMBER,
    T_ODD,
    T_SAMEAS,
    T_SEQUENCE,
    T_STRING,
    T_TRUE,
    T_UNDEFINED,
    T_UPPER,
    T_OPEQ,
    T_OPNE,
    T_OPLT,
    T_OPLE,
    T_OPGT,
    T_OPGE
};
/* Jinja's own filters and tests that the subset refuses by name (any other
 * name is a compile error in jinja2 too, refused the same way) */
static const char *const k_functions[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};
enum { FN_RANGE, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_DICT };
/* E_CALL's id for a call of a macro by its name (functions are 0.., methods 100 + M_*) */
enum { FN_MACRO = 99 };
static const char *const k_methods[] = {"strip", "lstrip", "rstrip", "split",      "startswith", "endswith", "upper",
                                        "lower", "title",  "capitalize", "replace", "find",      "join",     "items",
                                        "keys",  "values", "get"};
enum {
    M_STRIP,
    M_LSTRIP,
    M_RSTRIP,
    M_SPLIT,
    M_STARTSWITH,
    M_ENDSWITH,
    M_UPPER,
    M_LOWER,
    M_TITLE,
    M_CAPITALIZE,
    M_REPLACE,
    M_FIND,
    M_JOIN,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_GET
};

#define FIND(list, s, n) find_name(list, sizeof list / sizeof list[0], s, n)

/* ======================================================================== */
/* values                                                                   */
/* ======================================================================== */

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_LOOP, V_FUNC, V_METHOD, V_MACRO } vtype;

struct jlist;
struct jdict;
struct jloop;
typedef struct jv {
    uint8_t t;
    bool tup; /* V_LIST: a tuple */
    union {
        int64_t i;                   /* BOOL, INT */
        double f;                    /* FLOAT */
        struct {
            const char *p;
            size_t n;
        } s;                         /* STR; UNDEF: the name (p may be NULL) */
        struct jlist *l;             /* LIST */
        struct jdict *d;             /* DICT, NS */
        struct jloop *lp;            /* LOOP */
        struct {
            int id;
            struct jv *self;
        } m;                         /* FUNC (id), METHOD (id, receiver) */
        const struct node *mac;      /* MACRO: its S_MACRO statement */
    } u;
} jv;

typedef struct jlist {
    size_t n;
    jv *v;
} jlist;

typedef struct jdict {
    size_t n, cap;
    jv *k, *v;
} jdict;

typedef struct jloop {
    int64_t i, n;
    const jlist *items;
} jloop;

typedef struct {
    const char *name;
    size_t len;
    jv v;
} var;

typedef struct {
    char *p;
    size_t n, cap, max;
    bool over, capped;
} sbuf;

typedef struct {
    const rc_jinja *J;
    arena ar;
    sbuf *out;
    var *vars;
    size_t nv, cv, base;
    /* macros: the template's own variables are vars [0, root_n) (those of the render call, then those the top
     * level sets while no loop or macro frame is open: frames == 0); a macro's body sees them and its own frame,
     * and vars [gap_lo, gap_hi) (its caller's loop and macro frames) are hidden from it (jinja2's scoping) */
    size_t root_n, gap_lo, gap_hi;
    int frames;
    int64_t steps;
    int flow; /* 1 break, 2 continue */
    int line;
    rc_status st;
    char err[512];
} ctx;

static const jv k_undef = {.t = V_UNDEF};
static const jv k_none = {.t = V_NONE};

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) */
typedef struct {
    bool ascii, sort;
    const char *ind;
    size_t indn;
    bool indent;
    const char *isep, *ksep;
    size_t isepn, ksepn;
} jopt;

/* a call's arguments: positional values and keyword values by name */
typedef struct {
    jv pos[8];
    size_t np;
    const char *kn[8];
    size_t kl[8];
    jv kv[8];
    size_t nkw;
} args;

/* ======================================================================== */
/* functions the files call across                                          */
/* ======================================================================== */

/* jinja_lex.c */
void *ar_alloc(arena *a, size_t n);
void ar_free(arena *a);
bool py_space(uint32_t cp);
uint32_t u8_cp(const char *str, size_t n, size_t *len);
size_t u8_prev(const char *s, size_t e);
size_t u8_put(char *o, uint32_t cp);
size_t u8_count(const char *s, size_t n);
int count_nl(const char *s, size_t n);
size_t ws_prefix(const char *s, size_t n);
bool is_dig(char c);
bool lx_run(lexer *L);

/* jinja_parse.c */
bool sn_is(const char *s, size_t n, const char *w);
int find_name(const char *const *list, size_t n, const char *s, size_t sn);

/* jinja_value.c */
bool rcj_fail(ctx *C, rc_status st, const char *fmt, ...);
bool oom(ctx *C);
bool too_big(ctx *C);
bool rcj_step(ctx *C, size_t work);
void *C_alloc(ctx *C, size_t n);
void sb_add(sbuf *b, const char *s, size_t n);
void sb_str(sbuf *b, const char *s);
jv mkstr(const char *p, size_t n);
jv mkint(int64_t i);
jv mkbool(bool b);
jv mkfloat(double f);
jv undef_named(const char *p, size_t n);
bool new_list(ctx *C, size_t n, jv *out, bool tup);
char *new_str(ctx *C, size_t n, jv *out);
const char *type_name(const jv *v);
bool undefined_error(ctx *C, const jv *v);
bool truthy(const jv *v);
bool is_num(const jv *v);
double num_f(const jv *v);
bool dict_find(const jdict *d, const jv *k, size_t *at);
bool dict_find_str(const jdict *d, const char *s, size_t n, size_t *at);
bool veq(const jv *a, const jv *b, int depth);
bool vcmp(ctx *C, const jv *a, const jv *b, int *r, int depth);
bool sb_done(ctx *C, sbuf *b, jv *out);
bool to_str(ctx *C, const jv *v, jv *out);
bool rcj_print(ctx *C, sbuf *b, const jv *v);
bool vjson(ctx *C, sbuf *b, const jv *v, const jopt *o, int depth);
bool from_json(ctx *C, const json_t *j, jv *out, int depth);
bool var_lookup(const ctx *C, const char *s, size_t n, jv *out);
bool var_set(ctx *C, const char *s, size_t n, const jv *v);
size_t *cp_offsets(ctx *C, const char *s, size_t n, size_t *cnt);
jv vstrip(const jv *s, int which, const char *chars, size_t cn);
bool vcase(ctx *C, const jv *s, int how, jv *out);
bool vconcat(ctx *C, const char *a, size_t an, const char *b, size_t bn, jv *out);
const char *find_sub(const char *h, size_t hn, const char *nd, size_t nn);
bool to_items(ctx *C, const jv *v, jlist **out);

/* jinja_call.c */
bool getitem_v(ctx *C, const jv *o, const jv *k, jv *r);
bool getattr_v(ctx *C, const jv *o, const char *s, size_t n, jv *r);
bool eval_args(ctx *C, const node *x, args *a, size_t skip);
bool need_str(ctx *C, const jv *v, const char *what);
bool need_int(ctx *C, const jv *v, const char *what);
bool call_method(ctx *C, int id, const jv *self, const args *a, jv *r);
bool new_dict(ctx *C, size_t cap, jdict **out);
bool dict_put(ctx *C, jdict *d, const jv *k, const jv *v);
bool call_function(ctx *C, const node *x, jv *r);
bool run_test(ctx *C, int id, const jv *v, const args *a, bool *r);
bool apply_filter(ctx *C, int id, const jv *v, const args *a, jv *r);

/* jinja_eval.c */
bool binary(ctx *C, int op, const jv *a, const jv *b, jv *r);
bool ev(ctx *C, const node *x, jv *r);
bool call_macro(ctx *C, const node *x, jv *r);

#endif
