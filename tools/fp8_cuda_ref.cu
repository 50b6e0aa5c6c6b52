// NVIDIA's own fp32 -> fp8 conversion with __NV_SATFINITE, the one vLLM's
// reshape_and_cache_flash stores with (csrc/quantization/w8a8/fp8/nvidia/
// quant_utils.cuh scaled_vec_conversion): __nv_cvt_float_to_fp8 from
// cuda_fp8.hpp, run on the host (its software path; sm_89+ GPUs run
// cvt.rn.satfinite instead). Used by tools/make_fp8_fixtures.py only:
//   nvcc -o fp8_cuda_ref tools/fp8_cuda_ref.cu
//   fp8_cuda_ref IN OUT   IN: little-endian float32 values, OUT: for each,
//                         two bytes: E4M3 code, E5M2 code
#include <cuda_fp8.h>
#include <cstdio>
#include <vector>

int main(int argc, char **argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: fp8_cuda_ref IN OUT\n");
        return 2;
    }
    FILE *in = std::fopen(argv[1], "rb"), *out = std::fopen(argv[2], "wb");
    if (!in || !out) {
        std::fprintf(stderr, "fp8_cuda_ref: cannot open the files\n");
        return 1;
    }
    float x;
    while (std::fread(&x, sizeof x, 1, in) == 1) {
        unsigned char c[2] = {(unsigned char)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3),
                              (unsigned char)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)};
        if (std::fwrite(c, 1, 2, out) != 2)
            return 1;
    }
    return std::fclose(out) == 0 ? 0 : 1;
}
