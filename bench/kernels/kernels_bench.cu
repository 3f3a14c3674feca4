// kernels_bench: cast-transpose throughput (bytes read + written) against the device-to-device
// copy measured in the same run, the cost of the fence (the same kernel instantiated without it,
// here only), and the PyTorch op sequence it replaces. Prints markdown tables.
//
//   kernels_bench [--rows N] [--cols N] [--reps N] [--buffers N] [--no-explore]
//
// Every timing is the median of --reps launches, each timed with its own CUDA events, after
// warm-up; the variants of one row run interleaved, rotating through --buffers input and output
// sets (each input >= 64 MiB by default, so the 60 MB L2 never holds the next one).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cast_transpose_kernel.cuh"
#include "kernels/cuda_launch.h"
#if FP8AUDIT_BENCH_TORCH
#include "torch_sequence.h"
#endif

namespace fp8audit::kernels::bench {
namespace {

#define BENCH_CHECK(expr)                                                \
  do {                                                                   \
    const cudaError_t err_ = (expr);                                     \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(err_));                            \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

struct Options {
  int64_t rows = 8192;
  int64_t cols = 8192;
  int reps = 200;
  int warmup = 10;
  int buffers = 3;
  bool explore = true;
};

__device__ uint32_t Hash(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x);
}

// Values spread over about +-16 with varied magnitudes (no zeros-only data).
template <typename T>
__global__ void Fill(T* out, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t h = Hash(static_cast<uint64_t>(i), seed);
    const float v = (static_cast<float>(h & 0xFFFFu) / 65536.0f - 0.5f) *
                    __uint_as_float((127u - 6u + ((h >> 16) & 7u)) << 23) * 32.0f;
    if constexpr (sizeof(T) == 4) {
      out[i] = v;
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      out[i] = __float2bfloat16_rn(v);
    } else {
      out[i] = __float2half_rn(v);
    }
  }
}

struct Variant {
  std::string name;
  std::function<void(int)> launch;  // argument: buffer index
  double bytes;
  double median_ms = 0.0;
};

// Runs every variant once per repetition, each launch between its own events, in a new random
// order each repetition: a kernel inherits the state its predecessor left (dirty L2 lines, for
// one), so no variant may always follow the same one. Keeps every repetition's times.
std::vector<std::vector<float>> TimeInterleaved(std::vector<Variant>& variants,
                                                const Options& opt) {
  const size_t nv = variants.size();
  std::vector<cudaEvent_t> start(nv), stop(nv);
  for (size_t v = 0; v < nv; ++v) {
    BENCH_CHECK(cudaEventCreate(&start[v]));
    BENCH_CHECK(cudaEventCreate(&stop[v]));
  }
  std::vector<std::vector<float>> ms(nv);
  std::vector<size_t> order(nv);
  for (size_t v = 0; v < nv; ++v) order[v] = v;
  std::mt19937 rng(12345);
  for (int rep = 0; rep < opt.warmup + opt.reps; ++rep) {
    const int buffer = rep % opt.buffers;
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t v : order) {
      BENCH_CHECK(cudaEventRecord(start[v], nullptr));
      variants[v].launch(buffer);
      BENCH_CHECK(cudaEventRecord(stop[v], nullptr));
    }
    BENCH_CHECK(cudaDeviceSynchronize());
    BENCH_CHECK(cudaGetLastError());
    if (rep < opt.warmup) continue;
    for (size_t v = 0; v < nv; ++v) {
      float t = 0.0f;
      BENCH_CHECK(cudaEventElapsedTime(&t, start[v], stop[v]));
      ms[v].push_back(t);
    }
  }
  for (size_t v = 0; v < nv; ++v) {
    std::vector<float> sorted = ms[v];
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    variants[v].median_ms = sorted[sorted.size() / 2];
    cudaEventDestroy(start[v]);
    cudaEventDestroy(stop[v]);
  }
  return ms;
}

// Median over repetitions of a[i] / b[i] - 1 (both timed in repetition i).
double MedianPairedCost(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = static_cast<double>(a[i]) / b[i] - 1.0;
  std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
  return r[r.size() / 2];
}

double GBps(const Variant& v) { return v.bytes / (v.median_ms * 1e6); }

const char* Name(DType t) {
  return t == DType::kFloat32 ? "fp32" : t == DType::kBFloat16 ? "bf16" : "fp16";
}
const char* Name(Fp8Type f) { return Fp8TypeName(f).data(); }

struct Row {
  std::string pair;
  double copy_gbps, fenced_gbps, unfenced_gbps, fenced_ms, torch_ms, fence_cost;
  bool identical;
};

template <typename T, Fp8Type F>
Row BenchPair(const Options& opt, std::vector<std::string>& explore_lines) {
  constexpr DType kType = detail::InputTraits<T>::kDType;
  const int64_t n = opt.rows * opt.cols;
  const size_t in_bytes = static_cast<size_t>(n) * sizeof(T);
  std::vector<T*> in(opt.buffers), copy_dst(opt.buffers);
  std::vector<uint8_t*> rw(opt.buffers), cw(opt.buffers);
  for (int b = 0; b < opt.buffers; ++b) {
    BENCH_CHECK(cudaMalloc(&in[b], in_bytes));
    BENCH_CHECK(cudaMalloc(&copy_dst[b], in_bytes));
    BENCH_CHECK(cudaMalloc(&rw[b], n));
    BENCH_CHECK(cudaMalloc(&cw[b], n));
    Fill<T><<<1024, 256>>>(in[b], n, 1234u + b);
    BENCH_CHECK(cudaGetLastError());
  }
  float *scale, *amax, *scale_inv;
  BENCH_CHECK(cudaMalloc(&scale, sizeof(float)));
  BENCH_CHECK(cudaMalloc(&amax, 4 * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&scale_inv, sizeof(float)));
  const float one = 1.0f;
  BENCH_CHECK(cudaMemcpy(scale, &one, sizeof(float), cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemset(amax, 0, 4 * sizeof(float)));

  const double ct_bytes = static_cast<double>(in_bytes) + 2.0 * static_cast<double>(n);
  const int64_t tile_per_block = int64_t{1} << 40;  // clamped to the tile count: 1 tile a block
  std::vector<Variant> v;
  v.push_back({"device-to-device copy",
               [&](int b) {
                 BENCH_CHECK(cudaMemcpyAsync(copy_dst[b], in[b], in_bytes, cudaMemcpyDeviceToDevice,
                                             nullptr));
               },
               2.0 * static_cast<double>(in_bytes)});
  v.push_back({"library cast_transpose (fenced)",
               [&](int b) {
                 BENCH_CHECK(cuda::cast_transpose(in[b], kType, opt.rows, opt.cols, scale, F, rw[b],
                                                  cw[b], amax, scale_inv, nullptr));
               },
               ct_bytes});
  v.push_back(
      {"same kernel without the fence",
       [&](int b) {
         BENCH_CHECK((detail::launch_cast_transpose_kernel<T, F, false>(
             in[b], opt.rows, opt.cols, scale, rw[b], cw[b], amax + 1, scale_inv, nullptr)));
       },
       ct_bytes});
  if (opt.explore) {
    const int64_t resident = detail::resident_blocks(
        reinterpret_cast<const void*>(detail::cast_transpose_kernel<T, F, true, 128, 1>),
        detail::kCtThreads);
    v.push_back(
        {"fenced, 64-row tiles",
         [&](int b) {
           BENCH_CHECK((detail::launch_cast_transpose_kernel<T, F, true, 64>(
               in[b], opt.rows, opt.cols, scale, rw[b], cw[b], amax + 2, scale_inv, nullptr)));
         },
         ct_bytes});
    constexpr int64_t kTileCols = detail::CtTile<T, detail::kCtDefaultTileRows>::kCols;
    const int64_t tiles =
        ((opt.rows + detail::kCtDefaultTileRows - 1) / detail::kCtDefaultTileRows) *
        ((opt.cols + kTileCols - 1) / kTileCols);
    const int64_t per_block = (tiles + resident - 1) / resident;
    const int64_t equal_grid = (tiles + per_block - 1) / per_block;
    v.push_back({"fenced, grid trimmed to equal tiles per block",
                 [&, equal_grid](int b) {
                   BENCH_CHECK((detail::launch_cast_transpose_kernel<T, F, true>(
                       in[b], opt.rows, opt.cols, scale, rw[b], cw[b], amax + 3, scale_inv, nullptr,
                       equal_grid)));
                 },
                 ct_bytes});
    v.push_back({"fenced, one tile per block",
                 [&](int b) {
                   BENCH_CHECK((detail::launch_cast_transpose_kernel<T, F, true>(
                       in[b], opt.rows, opt.cols, scale, rw[b], cw[b], amax + 3, scale_inv, nullptr,
                       tile_per_block)));
                 },
                 ct_bytes});
    v.push_back({"unfenced, one tile per block",
                 [&](int b) {
                   BENCH_CHECK((detail::launch_cast_transpose_kernel<T, F, false>(
                       in[b], opt.rows, opt.cols, scale, rw[b], cw[b], amax + 3, scale_inv, nullptr,
                       tile_per_block)));
                 },
                 ct_bytes});
  }
  const std::vector<std::vector<float>> times = TimeInterleaved(v, opt);

  // The fenced and unfenced kernels wrote the same bytes (both ran last on the last buffer; the
  // library output of buffer 0 is recomputed and compared with the unfenced one).
  std::vector<uint8_t> a(n), b(n);
  BENCH_CHECK(cuda::cast_transpose(in[0], kType, opt.rows, opt.cols, scale, F, rw[0], cw[0], amax,
                                   scale_inv, nullptr));
  BENCH_CHECK(cudaMemcpy(a.data(), cw[0], n, cudaMemcpyDeviceToHost));
  BENCH_CHECK((detail::launch_cast_transpose_kernel<T, F, false>(
      in[0], opt.rows, opt.cols, scale, rw[0], cw[0], amax + 1, scale_inv, nullptr)));
  BENCH_CHECK(cudaMemcpy(b.data(), cw[0], n, cudaMemcpyDeviceToHost));
  float amaxes[4];
  BENCH_CHECK(cudaMemcpy(amaxes, amax, sizeof(amaxes), cudaMemcpyDeviceToHost));
  const bool identical = a == b && amaxes[0] == amaxes[1];

  Row row;
  row.pair = std::string(Name(kType)) + " -> " + Name(F);
  row.copy_gbps = GBps(v[0]);
  row.fenced_gbps = GBps(v[1]);
  row.unfenced_gbps = GBps(v[2]);
  row.fenced_ms = v[1].median_ms;
  row.fence_cost = MedianPairedCost(times[1], times[2]);
  row.identical = identical;
  row.torch_ms = -1.0;
#if FP8AUDIT_BENCH_TORCH
  row.torch_ms =
      TorchSequenceMedianMs(reinterpret_cast<void* const*>(in.data()), opt.buffers, kType, opt.rows,
                            opt.cols, F, opt.warmup, std::max(10, opt.reps / 4));
#endif
  for (const Variant& var : v) {
    char line[256];
    std::snprintf(line, sizeof(line), "| %s | %s | %.3f | %.0f | %.1f%% |", row.pair.c_str(),
                  var.name.c_str(), var.median_ms, GBps(var), 100.0 * GBps(var) / row.copy_gbps);
    explore_lines.push_back(line);
  }
  for (int i = 0; i < opt.buffers; ++i) {
    cudaFree(in[i]);
    cudaFree(copy_dst[i]);
    cudaFree(rw[i]);
    cudaFree(cw[i]);
  }
  cudaFree(scale);
  cudaFree(amax);
  cudaFree(scale_inv);
  return row;
}

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> int64_t { return i + 1 < argc ? std::atoll(argv[++i]) : 0; };
    if (a == "--rows") {
      opt.rows = next();
    } else if (a == "--cols") {
      opt.cols = next();
    } else if (a == "--reps") {
      opt.reps = static_cast<int>(next());
    } else if (a == "--buffers") {
      opt.buffers = static_cast<int>(next());
    } else if (a == "--no-explore") {
      opt.explore = false;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--rows N] [--cols N] [--reps N] [--buffers N] "
                   "[--no-explore]\n",
                   argv[0]);
      return 2;
    }
  }
  if (opt.rows <= 0 || opt.cols <= 0 || opt.reps <= 0 || opt.buffers <= 0) {
    std::fprintf(stderr, "rows, cols, reps and buffers must be positive\n");
    return 2;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "kernels_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MiB; input %lld x %lld, median of %d reps, %d buffers\n\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
              static_cast<long long>(opt.rows), static_cast<long long>(opt.cols), opt.reps,
              opt.buffers);
  std::vector<Row> rows;
  std::vector<std::string> explore;
  rows.push_back(BenchPair<float, Fp8Type::kE4M3>(opt, explore));
  rows.push_back(BenchPair<float, Fp8Type::kE5M2>(opt, explore));
  rows.push_back(BenchPair<__nv_bfloat16, Fp8Type::kE4M3>(opt, explore));
  rows.push_back(BenchPair<__nv_bfloat16, Fp8Type::kE5M2>(opt, explore));
  rows.push_back(BenchPair<__half, Fp8Type::kE4M3>(opt, explore));
  rows.push_back(BenchPair<__half, Fp8Type::kE5M2>(opt, explore));

  std::printf(
      "| input -> fp8 | input MiB | D2D copy GB/s | cast-transpose GB/s | %% of copy | "
      "without fence GB/s | fence cost | PyTorch sequence ms | cast-transpose ms | "
      "speed-up | same bytes |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  bool ok = true;
  for (const Row& r : rows) {
    const double mib = static_cast<double>(opt.rows * opt.cols) *
                       (r.pair.rfind("fp32", 0) == 0 ? 4.0 : 2.0) / (1 << 20);
    const double cost = 100.0 * r.fence_cost;
    char torch_ms[32] = "n/a", speedup[32] = "n/a";
    if (r.torch_ms > 0) {
      std::snprintf(torch_ms, sizeof(torch_ms), "%.3f", r.torch_ms);
      std::snprintf(speedup, sizeof(speedup), "%.1fx", r.torch_ms / r.fenced_ms);
    }
    std::printf("| %s | %.0f | %.0f | %.0f | %.1f%% | %.0f | %+.2f%% | %s | %.3f | %s | %s |\n",
                r.pair.c_str(), mib, r.copy_gbps, r.fenced_gbps,
                100.0 * r.fenced_gbps / r.copy_gbps, r.unfenced_gbps, cost, torch_ms, r.fenced_ms,
                speedup, r.identical ? "yes" : "NO");
    ok = ok && r.identical;
  }
  std::printf(
      "\nfence cost: median over repetitions of (fenced time / unfenced time - 1), "
      "both timed in the same repetition.\n");
  if (opt.explore) {
    std::printf("\n| pair | variant | median ms | GB/s | %% of copy |\n|---|---|---|---|---|\n");
    for (const auto& line : explore) std::printf("%s\n", line.c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace fp8audit::kernels::bench

int main(int argc, char** argv) { return fp8audit::kernels::bench::Main(argc, argv); }
