// SPDX-License-Identifier: Apache-2.0
// A device function defined here and called from main.cu's kernel: -rdc.
__device__ float scale(float v) { return 2.0f * v; }
