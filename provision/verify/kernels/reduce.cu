// Sum reduction of n floats (n a multiple of 4): each block reduces a grid-stride slice into one partial sum
// written to partial[blockIdx.x]; the host adds the partials (one per block).
// Each thread keeps REDUCE_UNROLL independent float4 loads in flight (64 bytes), into independent accumulators: with
// one load per iteration and 8 blocks per SM an H200 reduced at 77-78 % of its peak (2026-11-25), short of what the
// card moves for the same reason as the capped triad then, too few bytes in flight. Not yet timed on a GPU in this
// form (docs/verification.md).
// Shared-memory tree only (no warp shuffles) so the same source builds for every architecture from sm_37 on.
// REDUCE_THREADS must match the block size the verifier launches with.

#define REDUCE_THREADS 256
#define REDUCE_UNROLL 4

extern "C" __global__ void reduce_sum(const float4 *__restrict__ x, float *__restrict__ partial,
                                      unsigned long long n4)
{
    __shared__ float buf[REDUCE_THREADS];
    float acc[REDUCE_UNROLL];
#pragma unroll
    for (int k = 0; k < REDUCE_UNROLL; k++) {
        acc[k] = 0.0f;
    }
    unsigned long long stride = (unsigned long long)gridDim.x * REDUCE_THREADS;
    unsigned long long i = (unsigned long long)blockIdx.x * REDUCE_THREADS + threadIdx.x;
    for (; i + (REDUCE_UNROLL - 1) * stride < n4; i += REDUCE_UNROLL * stride) {
        float4 v[REDUCE_UNROLL];
#pragma unroll
        for (int k = 0; k < REDUCE_UNROLL; k++) {
            v[k] = x[i + k * stride];
        }
#pragma unroll
        for (int k = 0; k < REDUCE_UNROLL; k++) {
            acc[k] += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        }
    }
    for (; i < n4; i += stride) {  // the rest: fewer than REDUCE_UNROLL strides
        float4 v = x[i];
        acc[0] += (v.x + v.y) + (v.z + v.w);
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < REDUCE_UNROLL; k++) {
        sum += acc[k];
    }
    buf[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned int s = REDUCE_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            buf[threadIdx.x] += buf[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = buf[0];
    }
}
