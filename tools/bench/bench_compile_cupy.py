# SPDX-License-Identifier: Apache-2.0
"""CuPy's RawModule with its own disk cache, for the same kernel as bench_compile:
cold (a fresh CUPY_CACHE_DIR), warm in-process (a second RawModule), warm on
disk in a fresh process. Each up to a launchable kernel (get_function), the
result checked by one launch.
    python3 bench_compile_cupy.py OUTPUT.md            (the table)
    python3 bench_compile_cupy.py --disk-hit           (one fresh-process hit)"""
import os, statistics, subprocess, sys, tempfile, time

SOURCE = r'''
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
'''

def build(cp):
    t0 = time.perf_counter()
    mod = cp.RawModule(code=SOURCE, options=('--std=c++17',), name_expressions=['saxpy<float>'])
    k = mod.get_function('saxpy<float>')
    ms = (time.perf_counter() - t0) * 1e3
    return ms, k

def check(cp, k):
    import numpy as np
    n = 1024
    x = cp.ones(n, dtype=cp.float32); y = cp.full(n, 2.0, dtype=cp.float32)
    k((n // 256,), (256,), (np.float32(3.0), x, y, np.uint32(n)))
    assert float(y[0]) == 5.0 and float(y[-1]) == 5.0, "wrong values"

def child():
    import cupy as cp
    cp.zeros(1)  # context and CuPy's own start-up, not timed
    ms, k = build(cp)
    check(cp, k)
    print(f"{ms:.4f}")

def main(out):
    import cupy as cp
    cp.zeros(1)
    cold, memory, disk = [], [], []
    for rnd in range(7):
        d = tempfile.mkdtemp(prefix='cupy-cache-')
        env = dict(os.environ, CUPY_CACHE_DIR=d)
        os.environ['CUPY_CACHE_DIR'] = d
        # Cold needs a fresh process too: CuPy keeps an in-memory cache per process.
        r = subprocess.run([sys.executable, __file__, '--disk-hit'], env=env, capture_output=True, text=True, check=True)
        if rnd > 0:
            cold.append(float(r.stdout.split()[-1]))
        for _ in range(3):
            r = subprocess.run([sys.executable, __file__, '--disk-hit'], env=env, capture_output=True, text=True, check=True)
            disk.append(float(r.stdout.split()[-1]))
    ms, k = build(cp)
    check(cp, k)
    for _ in range(60):
        t, k = build(cp)
        memory.append(t)
    c, m, dk = statistics.median(cold), statistics.median(memory), statistics.median(disk)
    table = (f"| CuPy {cp.__version__} RawModule | median ms | vs cold |\n|---|---:|---:|\n"
             f"| cold: compile (fresh process, empty CUPY_CACHE_DIR) + get_function | {c:.3f} | 1x |\n"
             f"| warm, in-process (second RawModule) + get_function | {m:.4f} | {c/m:.0f}x |\n"
             f"| warm, on-disk hit in a fresh process + get_function | {dk:.4f} | {c/dk:.0f}x |\n"
             f"(cold: {len(cold)} processes; in-process: {len(memory)}; fresh processes: {len(disk)}; launched and checked)\n")
    print(table)
    with open(out, 'a') as f:
        f.write(table)

if __name__ == '__main__':
    if sys.argv[1:] == ['--disk-hit']:
        child()
    else:
        main(sys.argv[1])
