// SPDX-License-Identifier: Apache-2.0
// Thrust and CUB as libraries use them: sorts with a comparator and by key
// (merge sort, which CUB launches through cudaLaunchKernelEx with
// programmatic dependent launch), a radix sort, a scan and a reduction by
// key, a segmented reduction. Prints each result's checksum and whether it is sorted; the outputs
// under cudart and under libdrvshim_cudart must be identical.
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <cstdio>
#include <cub/device/device_merge_sort.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_reduce.cuh>

struct Greater {
  __host__ __device__ bool operator()(int a, int b) const { return a > b; }
};

static unsigned long long checksum(const thrust::host_vector<int>& v) {
  unsigned long long h = 1469598103934665603ull;
  for (int x : v) h = (h ^ static_cast<unsigned>(x)) * 1099511628211ull;
  return h;
}

static thrust::host_vector<int> pseudo_random(int n, unsigned seed) {
  thrust::host_vector<int> v(n);
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = static_cast<int>(seed >> 8) % 100000;
  }
  return v;
}

static int report(const char* what, const thrust::host_vector<int>& v, bool sorted) {
  std::printf("%-42s n=%zu sorted=%s checksum=%016llx last error=%s\n", what, v.size(), sorted ? "yes" : "NO",
              checksum(v), cudaGetErrorName(cudaGetLastError()));
  return sorted ? 0 : 1;
}

int main() {
  int failures = 0;
  const int n = 1 << 20;
  {
    thrust::device_vector<int> d = pseudo_random(n, 1);
    thrust::sort(d.begin(), d.end(), Greater());
    thrust::host_vector<int> h = d;
    failures += report("thrust::sort with a comparator", h, thrust::is_sorted(h.begin(), h.end(), Greater()));
  }
  {
    thrust::device_vector<int> keys = pseudo_random(n, 2);
    thrust::device_vector<int> values(n);
    thrust::sequence(values.begin(), values.end());
    thrust::stable_sort_by_key(keys.begin(), keys.end(), values.begin(), Greater());
    thrust::host_vector<int> hk = keys, hv = values;
    failures += report("thrust::stable_sort_by_key (keys)", hk, thrust::is_sorted(hk.begin(), hk.end(), Greater()));
    failures += report("thrust::stable_sort_by_key (values)", hv, true);
  }
  {
    thrust::device_vector<int> d = pseudo_random(n, 3);
    thrust::sort(d.begin(), d.end());  // radix sort
    thrust::host_vector<int> h = d;
    failures += report("thrust::sort (radix)", h, thrust::is_sorted(h.begin(), h.end()));
  }
  {
    thrust::device_vector<int> d = pseudo_random(n, 4);
    std::size_t bytes = 0;
    cudaError_t e = cub::DeviceMergeSort::SortKeys(nullptr, bytes, thrust::raw_pointer_cast(d.data()), n, Greater());
    thrust::device_vector<char> temp(bytes);
    if (e == cudaSuccess) {
      e = cub::DeviceMergeSort::SortKeys(thrust::raw_pointer_cast(temp.data()), bytes,
                                         thrust::raw_pointer_cast(d.data()), n, Greater());
    }
    std::printf("cub::DeviceMergeSort::SortKeys returned %s\n", cudaGetErrorName(e));
    thrust::host_vector<int> h = d;
    failures += report("cub::DeviceMergeSort::SortKeys", h, thrust::is_sorted(h.begin(), h.end(), Greater()));
  }
  {
    thrust::device_vector<int> in = pseudo_random(n, 5), out(n);
    std::size_t bytes = 0;
    cudaError_t e = cub::DeviceRadixSort::SortKeys(nullptr, bytes, thrust::raw_pointer_cast(in.data()),
                                                   thrust::raw_pointer_cast(out.data()), n);
    thrust::device_vector<char> temp(bytes);
    if (e == cudaSuccess) {
      e = cub::DeviceRadixSort::SortKeys(thrust::raw_pointer_cast(temp.data()), bytes,
                                         thrust::raw_pointer_cast(in.data()), thrust::raw_pointer_cast(out.data()), n);
    }
    std::printf("cub::DeviceRadixSort::SortKeys returned %s\n", cudaGetErrorName(e));
    thrust::host_vector<int> h = out;
    failures += report("cub::DeviceRadixSort::SortKeys", h, thrust::is_sorted(h.begin(), h.end()));
  }
  {
    thrust::device_vector<int> d = pseudo_random(n, 6);
    thrust::inclusive_scan(d.begin(), d.end(), d.begin());
    thrust::host_vector<int> h = d;
    failures += report("thrust::inclusive_scan", h, true);
  }
  {
    thrust::host_vector<int> hk(n);
    for (int i = 0; i < n; ++i) hk[i] = i / 7;
    thrust::device_vector<int> keys = hk, values = pseudo_random(n, 7), out_keys(n), out_values(n);
    auto ends = thrust::reduce_by_key(keys.begin(), keys.end(), values.begin(), out_keys.begin(), out_values.begin());
    out_values.resize(ends.second - out_values.begin());
    thrust::host_vector<int> h = out_values;
    failures += report("thrust::reduce_by_key", h, true);
  }
  {
    // Segments of 1 to 64 elements (offsets i*(i+1)/2 ... as far as n reaches): sums per segment.
    thrust::host_vector<int> offsets(1, 0);
    for (int len = 1; offsets.back() + len <= n; len = len % 64 + 1) offsets.push_back(offsets.back() + len);
    const int segments = static_cast<int>(offsets.size()) - 1;
    thrust::device_vector<int> in = pseudo_random(n, 8), out(segments), d_offsets = offsets;
    const int* first = thrust::raw_pointer_cast(d_offsets.data());
    std::size_t bytes = 0;
    cudaError_t e = cub::DeviceSegmentedReduce::Sum(nullptr, bytes, thrust::raw_pointer_cast(in.data()),
                                                    thrust::raw_pointer_cast(out.data()), segments, first, first + 1);
    thrust::device_vector<char> temp(bytes);
    if (e == cudaSuccess) {
      e = cub::DeviceSegmentedReduce::Sum(thrust::raw_pointer_cast(temp.data()), bytes,
                                          thrust::raw_pointer_cast(in.data()), thrust::raw_pointer_cast(out.data()),
                                          segments, first, first + 1);
    }
    std::printf("cub::DeviceSegmentedReduce::Sum returned %s\n", cudaGetErrorName(e));
    thrust::host_vector<int> h = out, hin = in;
    bool right = e == cudaSuccess;
    for (int s = 0; s < segments && right; ++s) {
      long long sum = 0;
      for (int i = offsets[s]; i < offsets[s + 1]; ++i) sum += hin[i];
      right = static_cast<int>(sum) == h[s];
    }
    failures += report("cub::DeviceSegmentedReduce::Sum", h, right);
  }
  std::printf("thrust_sort: %s\n", failures == 0 ? "PASS" : "WRONG RESULT");
  return failures == 0 ? 0 : 1;
}
