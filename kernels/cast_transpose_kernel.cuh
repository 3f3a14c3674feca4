// The cast-transpose kernel template. The library (cast_transpose.cu) instantiates it with
// kFenced = true only; the benchmark also instantiates kFenced = false to measure the fence.
//
// Work split: the input (rows x cols, row-major) is cut into tiles of kTileRows rows by 16
// sixteen-byte vectors (64 float or 128 bf16/fp16 columns). A block of 256 threads walks tiles
// with a grid stride. For a full, aligned tile each thread loads kTileRows/16 vectors (16-byte
// loads, several in flight), converts them, stores the rowwise bytes and parks them in shared
// memory; after a barrier each thread reads 4x4-byte blocks back, transposes them in registers
// and stores 4-byte runs of the columnwise output (a warp writes 128 contiguous bytes of an
// output row when kTileRows = 128). Tiles at the edges, and tensors whose shape or alignment
// rules out vector access, go through a scalar path. Both paths end in the same place: every
// thread fences its stores and only then does the block publish its amax with one atomicMax.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/device_common.cuh"

namespace fp8audit::kernels::detail {

constexpr int kCtThreads = 256;
constexpr int kCtVecsPerRow = 16;
constexpr int kCtDefaultTileRows = 128;

template <typename T, int kTileRows>
struct CtTile {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte load
  static constexpr int kCols = kCtVecsPerRow * kVec;             // 64 or 128
  static constexpr int kWords = kCols / 4;                       // u32 words per smem row
  static constexpr int kLoads = kTileRows * kCtVecsPerRow / kCtThreads;  // vectors per thread
  static constexpr int kRowsPerPass = kCtThreads / kCtVecsPerRow;        // 16
  static constexpr int kGroups = kTileRows / 4;                          // 4-row groups
  static constexpr int kUnitsPerThread = kGroups * kWords / kCtThreads;
  static_assert(kTileRows % 64 == 0 && kLoads >= 1 && kUnitsPerThread >= 1);
};

// Word (r, cw) of the staged FP8 tile lives at r * kWords + (cw ^ swizzle(r)): conflict-free
// for the row-major writes and (for 16-bit inputs) the 4-row column reads.
template <int kWords>
__device__ __forceinline__ int ct_smem_word(int r, int cw) {
  return r * kWords + (cw ^ (((r >> 2) ^ (r & 3)) & (kWords - 1)));
}

// o[j] = bytes j of a0..a3 (a0's in the low byte).
__device__ __forceinline__ void transpose_4x4_bytes(uint32_t a0, uint32_t a1, uint32_t a2,
                                                    uint32_t a3, uint32_t (&o)[4]) {
  const uint32_t t0 = __byte_perm(a0, a1, 0x5140);
  const uint32_t t1 = __byte_perm(a0, a1, 0x7362);
  const uint32_t t2 = __byte_perm(a2, a3, 0x5140);
  const uint32_t t3 = __byte_perm(a2, a3, 0x7362);
  o[0] = __byte_perm(t0, t2, 0x5410);
  o[1] = __byte_perm(t0, t2, 0x7632);
  o[2] = __byte_perm(t1, t3, 0x5410);
  o[3] = __byte_perm(t1, t3, 0x7632);
}

// Running |x| maxima of one thread: float bits (scalar path and float inputs) and, for 16-bit
// inputs on the vector path, the two 16-bit magnitude maxima of widen_pair.
struct AbsMax {
  uint32_t float_bits = 0;
  uint32_t lo16 = 0;
  uint32_t hi16 = 0;
};

template <typename T, Fp8Type F, int kTileRows>
__device__ __forceinline__ void ct_full_tile(const T* __restrict__ input, int64_t rows,
                                             int64_t cols, int64_t r0, int64_t c0, float scale,
                                             uint8_t* __restrict__ rowwise,
                                             uint8_t* __restrict__ columnwise, uint32_t* smem,
                                             AbsMax& m) {
  using Tile = CtTile<T, kTileRows>;
  const int vc = threadIdx.x % kCtVecsPerRow;
  const int rb = threadIdx.x / kCtVecsPerRow;
  uint4 v[Tile::kLoads];
#pragma unroll
  for (int j = 0; j < Tile::kLoads; ++j) {
    const int r = rb + Tile::kRowsPerPass * j;
    const uint4* src = reinterpret_cast<const uint4*>(input + (r0 + r) * cols + c0) + vc;
    v[j] = __ldg(src);
  }
#pragma unroll
  for (int j = 0; j < Tile::kLoads; ++j) {
    const int r = rb + Tile::kRowsPerPass * j;
    uint8_t* dst = rowwise + (r0 + r) * cols + c0 + vc * Tile::kVec;
    if constexpr (sizeof(T) == 4) {
      const float x0 = __uint_as_float(v[j].x), x1 = __uint_as_float(v[j].y);
      const float x2 = __uint_as_float(v[j].z), x3 = __uint_as_float(v[j].w);
      m.float_bits = max(m.float_bits, v[j].x & 0x7FFFFFFFu);
      m.float_bits = max(m.float_bits, v[j].y & 0x7FFFFFFFu);
      m.float_bits = max(m.float_bits, v[j].z & 0x7FFFFFFFu);
      m.float_bits = max(m.float_bits, v[j].w & 0x7FFFFFFFu);
      const uint32_t lo = cvt_pair<F>(__fmul_rn(x0, scale), __fmul_rn(x1, scale));
      const uint32_t hi = cvt_pair<F>(__fmul_rn(x2, scale), __fmul_rn(x3, scale));
      const uint32_t word = lo | (hi << 16);
      *reinterpret_cast<uint32_t*>(dst) = word;
      smem[ct_smem_word<Tile::kWords>(r, vc)] = word;
    } else {
      const float2 f0 = widen_pair<T>(v[j].x, m.lo16, m.hi16);
      const float2 f1 = widen_pair<T>(v[j].y, m.lo16, m.hi16);
      const float2 f2 = widen_pair<T>(v[j].z, m.lo16, m.hi16);
      const float2 f3 = widen_pair<T>(v[j].w, m.lo16, m.hi16);
      const uint32_t p0 = cvt_pair<F>(__fmul_rn(f0.x, scale), __fmul_rn(f0.y, scale));
      const uint32_t p1 = cvt_pair<F>(__fmul_rn(f1.x, scale), __fmul_rn(f1.y, scale));
      const uint32_t p2 = cvt_pair<F>(__fmul_rn(f2.x, scale), __fmul_rn(f2.y, scale));
      const uint32_t p3 = cvt_pair<F>(__fmul_rn(f3.x, scale), __fmul_rn(f3.y, scale));
      const uint32_t w0 = p0 | (p1 << 16);
      const uint32_t w1 = p2 | (p3 << 16);
      *reinterpret_cast<uint2*>(dst) = make_uint2(w0, w1);
      smem[ct_smem_word<Tile::kWords>(r, 2 * vc)] = w0;
      smem[ct_smem_word<Tile::kWords>(r, 2 * vc + 1)] = w1;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < Tile::kUnitsPerThread; ++k) {
    const int u = threadIdx.x + k * kCtThreads;
    const int g = u % Tile::kGroups;
    const int cw = u / Tile::kGroups;
    const uint32_t a0 = smem[ct_smem_word<Tile::kWords>(4 * g + 0, cw)];
    const uint32_t a1 = smem[ct_smem_word<Tile::kWords>(4 * g + 1, cw)];
    const uint32_t a2 = smem[ct_smem_word<Tile::kWords>(4 * g + 2, cw)];
    const uint32_t a3 = smem[ct_smem_word<Tile::kWords>(4 * g + 3, cw)];
    uint32_t o[4];
    transpose_4x4_bytes(a0, a1, a2, a3, o);
    uint8_t* dst = columnwise + (c0 + 4 * cw) * rows + r0 + 4 * g;
#pragma unroll
    for (int j = 0; j < 4; ++j) *reinterpret_cast<uint32_t*>(dst + j * rows) = o[j];
  }
}

template <typename T, Fp8Type F, int kTileRows>
__device__ __forceinline__ void ct_edge_tile(const T* __restrict__ input, int64_t rows,
                                             int64_t cols, int64_t r0, int64_t c0, float scale,
                                             uint8_t* __restrict__ rowwise,
                                             uint8_t* __restrict__ columnwise, uint32_t* smem,
                                             AbsMax& m) {
  using Tile = CtTile<T, kTileRows>;
  uint8_t* smem_bytes = reinterpret_cast<uint8_t*>(smem);
  for (int idx = threadIdx.x; idx < kTileRows * Tile::kCols; idx += kCtThreads) {
    const int r = idx / Tile::kCols;
    const int c = idx % Tile::kCols;
    if (r0 + r < rows && c0 + c < cols) {
      uint32_t abs_bits;
      const float x = load_scalar<T>(input + (r0 + r) * cols + c0 + c, abs_bits);
      m.float_bits = max(m.float_bits, abs_bits);
      const uint8_t q = static_cast<uint8_t>(cvt_pair<F>(__fmul_rn(x, scale), 0.0f) & 0xFFu);
      rowwise[(r0 + r) * cols + c0 + c] = q;
      smem_bytes[4 * ct_smem_word<Tile::kWords>(r, c >> 2) + (c & 3)] = q;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTileRows * Tile::kCols; idx += kCtThreads) {
    const int c = idx / kTileRows;
    const int r = idx % kTileRows;
    if (r0 + r < rows && c0 + c < cols) {
      columnwise[(c0 + c) * rows + r0 + r] =
          smem_bytes[4 * ct_smem_word<Tile::kWords>(r, c >> 2) + (c & 3)];
    }
  }
}

template <typename T, Fp8Type F, bool kFenced, int kTileRows, int kMinBlocksPerSm>
__global__ void __launch_bounds__(kCtThreads, kMinBlocksPerSm)
    cast_transpose_kernel(const T* __restrict__ input, int64_t rows, int64_t cols,
                          const float* __restrict__ scale_ptr, uint8_t* __restrict__ rowwise,
                          uint8_t* __restrict__ columnwise, unsigned int* amax_bits,
                          float* scale_inv, int64_t tiles_per_row, int64_t num_tiles,
                          bool vector_ok) {
  using Tile = CtTile<T, kTileRows>;
  __shared__ uint32_t smem[kTileRows * Tile::kWords];
  __shared__ unsigned int warp_scratch[kCtThreads / 32];
  const float scale = *scale_ptr;
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = device_reciprocal(scale);
  AbsMax m;
  for (int64_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    const int64_t r0 = (tile / tiles_per_row) * kTileRows;
    const int64_t c0 = (tile % tiles_per_row) * Tile::kCols;
    if (vector_ok && r0 + kTileRows <= rows && c0 + Tile::kCols <= cols) {
      ct_full_tile<T, F, kTileRows>(input, rows, cols, r0, c0, scale, rowwise, columnwise, smem, m);
    } else {
      ct_edge_tile<T, F, kTileRows>(input, rows, cols, r0, c0, scale, rowwise, columnwise, smem, m);
    }
    __syncthreads();  // the next tile reuses smem
  }
  uint32_t local = m.float_bits;
  if constexpr (sizeof(T) == 2) local = max(local, pair_maxima_to_float_bits<T>(m.lo16, m.hi16));
  // All of this thread's output stores are above; nothing below stores output.
  fence_then_publish_amax<kFenced>(local, amax_bits, warp_scratch);
}

// Blocks that fit on the device at once for `kernel` (cached per kernel and device).
inline int resident_blocks(const void* kernel, int threads) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> cache;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(kernel, device);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int sms = 0;
  int per_sm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess) {
    return 0;
  }
  const int blocks = std::max(1, sms * per_sm);
  cache.emplace(key, blocks);
  return blocks;
}

inline bool aligned_to(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

// Host side of one instantiation. grid_blocks <= 0: as many blocks as are resident at once;
// otherwise that many blocks. kMinBlocksPerSm > 1 caps
// registers so that many blocks fit on a multiprocessor.
template <typename T, Fp8Type F, bool kFenced, int kTileRows = kCtDefaultTileRows,
          int kMinBlocksPerSm = 1>
cudaError_t launch_cast_transpose_kernel(const T* input, int64_t rows, int64_t cols,
                                         const float* scale, uint8_t* rowwise, uint8_t* columnwise,
                                         float* amax, float* scale_inv, cudaStream_t stream,
                                         int64_t grid_blocks = 0) {
  using Tile = CtTile<T, kTileRows>;
  if (input == nullptr || scale == nullptr || rowwise == nullptr || columnwise == nullptr ||
      amax == nullptr || scale_inv == nullptr || rows <= 0 || cols <= 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t tiles_per_row = (cols + Tile::kCols - 1) / Tile::kCols;
  const int64_t num_tiles = ((rows + kTileRows - 1) / kTileRows) * tiles_per_row;
  const bool vector_ok = cols % Tile::kVec == 0 && rows % 4 == 0 && aligned_to(input, 16) &&
                         aligned_to(rowwise, Tile::kVec) && aligned_to(columnwise, 4);
  auto kernel = cast_transpose_kernel<T, F, kFenced, kTileRows, kMinBlocksPerSm>;
  int64_t grid = grid_blocks;
  if (grid <= 0) {
    // As many blocks as fit at once; tiles are dealt out with a grid stride, so every
    // multiprocessor gets about the same share.
    grid = resident_blocks(reinterpret_cast<const void*>(kernel), kCtThreads);
    if (grid <= 0) grid = num_tiles;  // occupancy query failed: one tile per block
  }
  grid = std::min<int64_t>({grid, num_tiles, int64_t{0x7FFFFFFF}});
  kernel<<<static_cast<unsigned int>(grid), kCtThreads, 0, stream>>>(
      input, rows, cols, scale, rowwise, columnwise, reinterpret_cast<unsigned int*>(amax),
      scale_inv, tiles_per_row, num_tiles, vector_ok);
  return cudaGetLastError();
}

}  // namespace fp8audit::kernels::detail
