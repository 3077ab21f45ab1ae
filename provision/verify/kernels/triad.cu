// STREAM-style triad a[i] = b[i] + s * c[i] (single precision).
// Bytes moved per element: read b, read c, write a = 12 (STREAM counts no write-allocate traffic).
// float4 accesses when the arrays are 16-byte aligned and n is a multiple of 4 (the verifier always allocates so).
//
// `triad` is what the verifier times. It is launched with a grid that covers the array (one float4 per thread):
// on an H200 (2026-11-25, n = 2^26) that moved 4215 GB/s, PyTorch's own triad 4268, while a grid capped at 8 blocks
// per SM with this grid-stride loop moved 3914 (the cap left too few bytes in flight). The loop stays, so any grid
// gives the right result.
// The GPU test compares it with a reference kernel in the same run (triad_reference.cu).

extern "C" __global__ void triad(float4 *__restrict__ a, const float4 *__restrict__ b,
                                 const float4 *__restrict__ c, float s, unsigned long long n4)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 bv = b[i];
        float4 cv = c[i];
        float4 r;
        r.x = bv.x + s * cv.x;
        r.y = bv.y + s * cv.y;
        r.z = bv.z + s * cv.z;
        r.w = bv.w + s * cv.w;
        a[i] = r;
    }
}
