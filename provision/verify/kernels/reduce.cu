// Sum reduction of n floats (n a multiple of 4): each block reduces a grid-stride slice into one partial sum
// written to partial[blockIdx.x]; the host adds the partials (there are a few hundred).
// Shared-memory tree only (no warp shuffles) so the same source builds for every architecture from sm_37 on.
// REDUCE_THREADS must match the block size the verifier launches with.

#define REDUCE_THREADS 256

extern "C" __global__ void reduce_sum(const float4 *__restrict__ x, float *__restrict__ partial,
                                      unsigned long long n4)
{
    __shared__ float buf[REDUCE_THREADS];
    float acc = 0.0f;
    unsigned long long stride = (unsigned long long)gridDim.x * REDUCE_THREADS;
    for (unsigned long long i = (unsigned long long)blockIdx.x * REDUCE_THREADS + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    buf[threadIdx.x] = acc;
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
