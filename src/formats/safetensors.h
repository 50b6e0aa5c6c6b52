/* safetensors reader: single files and sharded checkpoints
 * (model.safetensors.index.json), memory-mapped, validated like the reference
 * Rust reader (huggingface/safetensors, SafeTensors::read_metadata +
 * Metadata::validate), plus duplicate-name and shard-path checks.
 *
 * Tensor data may be unaligned in the file; it is only ever read with memcpy.
 */
#ifndef RC_SAFETENSORS_H
#define RC_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "status.h"

#define RC_ST_MAX_HEADER 100000000ull /* the reference reader's MAX_HEADER_SIZE */
#define RC_ST_MAX_DIMS 8
/* Our own limits (RC_ERR_UNSUPPORTED above them), checked before the work
 * they bound, far above real checkpoints: Llama-3.1-405B has 191 shards and
 * about 1,100 tensors, DeepSeek-V3 163 shards and about 90,000 tensors. */
#define RC_ST_MAX_SHARDS 16384
#define RC_ST_MAX_TENSORS_PER_FILE 262144
#define RC_ST_MAX_TENSORS 1048576

typedef struct {
    char *name;
    char dtype_name[16];         /* as written in the file */
    int dtype;                   /* rc_dtype, or -1 for a known dtype we cannot load */
    int ndim;
    int64_t shape[RC_ST_MAX_DIMS];
    uint64_t begin, end;         /* offsets relative to the data buffer */
    const unsigned char *data;   /* mapped bytes (possibly unaligned) */
    int file;                    /* index into rc_safetensors.files */
    /* a dequantized weight (quant != 0): dtype, dtype_name and shape are the
     * dequantized tensor's, data the stored codes (FP8 [..., rows, cols] or
     * MXFP4 blocks [E, R, G, 16]), qscale the stored scales; the values are
     * computed on first read into deq (owned) */
    int quant;                   /* RC_ST_Q_* */
    int qscale_dtype;            /* scales: RC_F32 / RC_BF16 (FP8), -1 for U8 (MXFP4) */
    const unsigned char *qscale;
    int64_t qdim[4];             /* FP8: outer, rows, cols, -; MXFP4: E, R, G, - */
    int64_t qblock[2];           /* FP8 block size b0, b1 */
    unsigned char *deq;
} rc_st_tensor;

enum { RC_ST_Q_NONE, RC_ST_Q_FP8_BLOCK, RC_ST_Q_MXFP4 };

/* the formats as stored on disk, before dequantization: per dtype */
typedef struct {
    char dtype_name[16];
    int64_t count;
    uint64_t bytes;
} rc_st_stored;

typedef struct {
    char *path;
    unsigned char *map;
    size_t size;
} rc_st_file;

typedef struct {
    rc_st_file *files;
    int nfiles, files_cap;
    rc_st_tensor *tensors;       /* sorted by name once every file is read */
    int64_t ntensors, tensors_cap;
    rc_st_stored stored[24];     /* rc_st_open_dir: the stored dtypes, in order of first use */
    int nstored;
    char quant_method[16];       /* "" or config.json's quantization_config.quant_method */
} rc_safetensors;

/* Open one .safetensors file. */
rc_status rc_st_open_file(const char *path, rc_safetensors **out);
/* Open a model folder: model.safetensors.index.json if present, else
 * model.safetensors. When DIR/config.json has a quantization_config with
 * quant_method fp8 (F8_E4M3 weights with <name>_scale_inv, blocks of
 * weight_block_size) or mxfp4 (<name>_blocks + <name>_scales), those pairs
 * read as one dequantized weight (src/formats/quant.h; BF16, or config's
 * dtype when float32 / float16) and the scale tensors are not listed. */
rc_status rc_st_open_dir(const char *dir, rc_safetensors **out);
void rc_st_close(rc_safetensors *st);
/* The dequantization rc_st_open_dir applies, on an open st with the JSON
 * text of a config.json (path names it in errors). */
rc_status rc_st_apply_quant(rc_safetensors *st, const char *config_text, size_t len, const char *path);

const rc_st_tensor *rc_st_find(const rc_safetensors *st, const char *name);
const char *rc_st_path_of(const rc_safetensors *st, const rc_st_tensor *t);

/* Format a shape as "[a, b, c]" into buf. */
const char *rc_st_shape_str(char *buf, size_t n, int ndim, const int64_t *shape);

/* Copy tensor `name` into dst as float32, converting from F32/F16/BF16/F64.
 * The tensor must exist and have exactly the expected shape; errors name the
 * tensor, the expected and the actual shape and dtype. */
rc_status rc_st_read_f32(const rc_safetensors *st, const char *name, int ndim,
                         const int64_t *shape, float *dst);
/* rc_st_read_f32 for model weights: also counts the values that are not
 * finite as fp32 (NaN, Inf, F64 beyond the fp32 range) in the same pass and
 * rejects the tensor (RC_ERR_FORMAT naming the file, the tensor, the count
 * and the first index) when there are any. */
rc_status rc_st_read_weight(const rc_safetensors *st, const char *name, int ndim,
                            const int64_t *shape, float *dst);
/* rc_st_read_weight into dst as dt: RC_F32 (any float dtype converted), or
 * the stored dtype itself when it is BF16 or F16 (the bytes copied). */
rc_status rc_st_read_weight_as(const rc_safetensors *st, const char *name, int ndim, const int64_t *shape,
                               rc_dtype dt, void *dst);
/* The checks of rc_st_read_weight that need no data: present, shape, a
 * float dtype (the values are not read, so non-finite ones are not found). */
rc_status rc_st_check_weight(const rc_safetensors *st, const char *name, int ndim, const int64_t *shape);
/* Weight `name` as stored, without a copy: the checks of rc_st_check_weight
 * and, with scan, those of rc_st_read_weight on the stored values (not for
 * F64); *data: the mapped bytes, *dtype: the stored rc_dtype, *aligned: the
 * data is aligned to its element size (usable as an array in place). A
 * dequantized weight (quant) is reported unaligned (to be copied with
 * rc_st_read_weight_as, which computes it and keeps no copy), with *data
 * NULL unless scan. */
rc_status rc_st_weight_view(const rc_safetensors *st, const char *name, int ndim, const int64_t *shape,
                            bool scan, const void **data, int *dtype, bool *aligned);
/* Drop the mapped pages wholly inside [p, p + n) from memory when the range
 * lies in one of st's files (they are read from the file again on use);
 * nothing otherwise. */
void rc_st_release(const rc_safetensors *st, const void *p, size_t n);
/* Same for integer / f64 reference data (I32 -> int32, F64 -> double). */
rc_status rc_st_read_i32(const rc_safetensors *st, const char *name, int ndim,
                         const int64_t *shape, int32_t *dst);
rc_status rc_st_read_f64(const rc_safetensors *st, const char *name, int ndim,
                         const int64_t *shape, double *dst);

#endif
