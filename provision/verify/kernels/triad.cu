// STREAM-style triad a[i] = b[i] + s * c[i] (single precision).
// Bytes moved per element: read b, read c, write a = 12 (STREAM counts no write-allocate traffic).
// float4 accesses when the arrays are 16-byte aligned and n is a multiple of 4 (the verifier always allocates so);
// a grid-stride loop keeps the grid size independent of n.

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
