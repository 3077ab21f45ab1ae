// Tiled single-precision GEMM, row-major: C = alpha * A(MxK) * B(KxN) + beta * C(MxN).
//
// Each 256-thread block computes a 128x128 tile of C; each thread an 8x8 sub-tile held in registers (register
// blocking), arranged as 2x2 quadrants of 4x4 that sit 64 rows / 64 columns apart, so that the float4 reads of a
// quarter-warp from shared memory are consecutive (no bank conflicts) and the float4 stores of C coalesce.
// Per step of BK = 8 along K the block stages a 128x8 slice of A (stored transposed: As[k][m]) and an 8x128 slice
// of B in shared memory, double-buffered: the next slice is loaded from global memory into registers while the
// current one is multiplied, so one __syncthreads per step suffices. Global loads and stores are float4.
// Requirements the verifier guarantees: M and N multiples of 128, K a multiple of 8, rows 16-byte aligned
// (pointers from cuMemAlloc are 256-byte aligned).
// Structure after S. Boehm, "How to optimize a CUDA matmul kernel" (https://siboehm.com/articles/22/CUDA-MMM),
// kernels 6 (vectorised 2D block tiling) and 9-10 (thread layout for conflict-free shared-memory reads).

#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#define SGEMM_THREADS ((BM / TM) * (BN / TN))  // 256

extern "C" __global__ void __launch_bounds__(SGEMM_THREADS)
sgemm_128x128(int M, int N, int K, float alpha, const float *__restrict__ A, const float *__restrict__ B,
              float beta, float *__restrict__ C)
{
    __shared__ __align__(16) float As[2][BK * BM];  // As[buf][k * BM + m]
    __shared__ __align__(16) float Bs[2][BK * BN];  // Bs[buf][k * BN + n]

    const unsigned int tid = threadIdx.x;
    const unsigned int tx = tid % 16;  // columns tx*4 .. +3 and 64 + tx*4 .. +3
    const unsigned int ty = tid / 16;  // rows    ty*4 .. +3 and 64 + ty*4 .. +3

    A += (size_t)blockIdx.y * BM * K;
    B += (size_t)blockIdx.x * BN;
    C += (size_t)blockIdx.y * BM * N + (size_t)blockIdx.x * BN;

    // One float4 of A and one of B per thread per K step: 128x8 = 8x128 = 1024 floats = 256 float4.
    const unsigned int rowA = tid / 2, colA = (tid % 2) * 4;   // A[rowA][colA .. +3]
    const unsigned int rowB = tid / 32, colB = (tid % 32) * 4; // B[rowB][colB .. +3]

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            acc[i][j] = 0.0f;
        }
    }

    float4 a4 = *reinterpret_cast<const float4 *>(&A[(size_t)rowA * K + colA]);
    float4 b4 = *reinterpret_cast<const float4 *>(&B[(size_t)rowB * N + colB]);
    As[0][(colA + 0) * BM + rowA] = a4.x;
    As[0][(colA + 1) * BM + rowA] = a4.y;
    As[0][(colA + 2) * BM + rowA] = a4.z;
    As[0][(colA + 3) * BM + rowA] = a4.w;
    *reinterpret_cast<float4 *>(&Bs[0][rowB * BN + colB]) = b4;
    __syncthreads();

    int cur = 0;
    for (int bk = 0; bk < K; bk += BK) {
        const bool has_next = bk + BK < K;
        if (has_next) {  // issue the next slice's global loads before the math that hides their latency
            a4 = *reinterpret_cast<const float4 *>(&A[(size_t)rowA * K + bk + BK + colA]);
            b4 = *reinterpret_cast<const float4 *>(&B[(size_t)(bk + BK + rowB) * N + colB]);
        }
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 m0 = *reinterpret_cast<const float4 *>(&As[cur][k * BM + ty * 4]);
            const float4 m1 = *reinterpret_cast<const float4 *>(&As[cur][k * BM + ty * 4 + 64]);
            const float4 n0 = *reinterpret_cast<const float4 *>(&Bs[cur][k * BN + tx * 4]);
            const float4 n1 = *reinterpret_cast<const float4 *>(&Bs[cur][k * BN + tx * 4 + 64]);
            const float rm[TM] = {m0.x, m0.y, m0.z, m0.w, m1.x, m1.y, m1.z, m1.w};
            const float rn[TN] = {n0.x, n0.y, n0.z, n0.w, n1.x, n1.y, n1.z, n1.w};
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    acc[i][j] += rm[i] * rn[j];
                }
            }
        }
        if (has_next) {  // the other buffer: nobody reads it until after the barrier below
            const int nxt = cur ^ 1;
            As[nxt][(colA + 0) * BM + rowA] = a4.x;
            As[nxt][(colA + 1) * BM + rowA] = a4.y;
            As[nxt][(colA + 2) * BM + rowA] = a4.z;
            As[nxt][(colA + 3) * BM + rowA] = a4.w;
            *reinterpret_cast<float4 *>(&Bs[nxt][rowB * BN + colB]) = b4;
        }
        __syncthreads();
        cur ^= 1;
    }

    // acc[i][j]: row (i < 4 ? ty*4 + i : 64 + ty*4 + i - 4), column (j < 4 ? tx*4 + j : 64 + tx*4 + j - 4)
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const unsigned int row = (i < 4 ? 0 : 64) + ty * 4 + (i % 4);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float4 *dst = reinterpret_cast<float4 *>(&C[(size_t)row * N + half * 64 + tx * 4]);
            float4 c4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (beta != 0.0f) {  // BLAS semantics: with beta == 0, C is not read (it may hold NaNs)
                c4 = *dst;
            }
            c4.x = alpha * acc[i][half * 4 + 0] + beta * c4.x;
            c4.y = alpha * acc[i][half * 4 + 1] + beta * c4.y;
            c4.z = alpha * acc[i][half * 4 + 2] + beta * c4.z;
            c4.w = alpha * acc[i][half * 4 + 3] + beta * c4.w;
            *dst = c4;
        }
    }
}
