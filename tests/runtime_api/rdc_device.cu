// SPDX-License-Identifier: Apache-2.0
// The device half of rdc_main.cu: a __device__ function and variable other
// translation units use (relocatable device code).
__device__ int d_offset = 0;

__device__ int polynomial(int x) { return 3 * x * x + 2 * x + 1; }
