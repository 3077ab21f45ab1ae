// Compiled by the test with: g++ -std=c++20 -O1 -shared -fPIC -pthread harness.cpp (kernel dir on -I).
#include "cuda_emu.h"
#include "triad.cu"
#include "triad_reference.cu"
#include "reduce.cu"
#include "sgemm.cu"

extern "C" void emu_triad(float *a, const float *b, const float *c, float s, unsigned long long n, unsigned int grid) {
    emu_launch(dim3{grid, 1, 1}, dim3{256, 1, 1}, [=] {
        triad((float4 *)a, (const float4 *)b, (const float4 *)c, s, n / 4);
    });
}

extern "C" void emu_triad_unroll4(float *a, const float *b, const float *c, float s, unsigned long long n,
                                  unsigned int grid) {
    emu_launch(dim3{grid, 1, 1}, dim3{256, 1, 1}, [=] {
        triad_unroll4((float4 *)a, (const float4 *)b, (const float4 *)c, s, n / 4);
    });
}

extern "C" void emu_reduce(const float *x, float *partial, unsigned long long n, unsigned int grid) {
    emu_launch(dim3{grid, 1, 1}, dim3{REDUCE_THREADS, 1, 1}, [=] { reduce_sum((const float4 *)x, partial, n / 4); });
}

extern "C" void emu_sgemm(int M, int N, int K, float alpha, const float *A, const float *B, float beta, float *C) {
    emu_launch(dim3{(unsigned)N / BN, (unsigned)M / BM, 1}, dim3{SGEMM_THREADS, 1, 1},
               [=] { sgemm_128x128(M, N, K, alpha, A, B, beta, C); });
}
