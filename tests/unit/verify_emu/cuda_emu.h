// Just enough of CUDA C++ to run the verifier's kernels on the CPU: one std::thread per CUDA thread, one block
// at a time, __syncthreads as a std::barrier. It checks the kernels' index arithmetic and tiling, the part a
// GPU-less machine can check; it says nothing about speed. Used by tests/unit/test_verify_kernels_cpu.py.
#pragma once
#include <barrier>
#include <functional>
#include <thread>
#include <vector>

struct alignas(16) float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct dim3 { unsigned int x = 1, y = 1, z = 1; };

static thread_local dim3 threadIdx;
static dim3 blockIdx, blockDim, gridDim;
static std::barrier<> *emu_barrier = nullptr;
static inline void __syncthreads() { emu_barrier->arrive_and_wait(); }

#define __global__
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(n)

static void emu_launch(dim3 grid, dim3 block, const std::function<void()> &kernel) {
    gridDim = grid;
    blockDim = block;
    unsigned int nthreads = block.x * block.y * block.z;
    for (unsigned int by = 0; by < grid.y; ++by) {
        for (unsigned int bx = 0; bx < grid.x; ++bx) {
            blockIdx = dim3{bx, by, 1};
            std::barrier<> bar(nthreads);
            emu_barrier = &bar;
            std::vector<std::thread> threads;
            for (unsigned int t = 0; t < nthreads; ++t) {
                threads.emplace_back([&kernel, t, block] {
                    threadIdx = dim3{t % block.x, t / block.x, 1};
                    kernel();
                });
            }
            for (auto &th : threads) th.join();
        }
    }
}
