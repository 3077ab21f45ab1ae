// The reference triad the GPU test (tests/unit/test_verify_gpu.py) times beside the verifier's `triad` in the same
// run: four float4 of b and c in flight per thread, a grid of n4 / (4 * blockDim) blocks. On an H200 (2026-11-25,
// n = 2^26) this form moved 4233 GB/s, PyTorch's own triad 4268. Not part of `provision verify` (not compiled there).

#define TRIAD_UNROLL 4

extern "C" __global__ void triad_unroll4(float4 *__restrict__ a, const float4 *__restrict__ b,
                                         const float4 *__restrict__ c, float s, unsigned long long n4)
{
    // Each block covers TRIAD_UNROLL * blockDim consecutive float4s; a thread's loads are independent, so all of
    // them are in flight before the first result is stored.
    unsigned long long base = (unsigned long long)blockIdx.x * blockDim.x * TRIAD_UNROLL + threadIdx.x;
    float4 bv[TRIAD_UNROLL], cv[TRIAD_UNROLL];
#pragma unroll
    for (int k = 0; k < TRIAD_UNROLL; k++) {
        unsigned long long i = base + (unsigned long long)k * blockDim.x;
        if (i < n4) {
            bv[k] = b[i];
            cv[k] = c[i];
        }
    }
#pragma unroll
    for (int k = 0; k < TRIAD_UNROLL; k++) {
        unsigned long long i = base + (unsigned long long)k * blockDim.x;
        if (i < n4) {
            float4 r;
            r.x = bv[k].x + s * cv[k].x;
            r.y = bv[k].y + s * cv[k].y;
            r.z = bv[k].z + s * cv[k].z;
            r.w = bv[k].w + s * cv[k].w;
            a[i] = r;
        }
    }
}
