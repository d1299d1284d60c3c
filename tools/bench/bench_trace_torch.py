# SPDX-License-Identifier: Apache-2.0
"""A launch-bound PyTorch loop for drvshim-trace's overhead on an unmodified framework.

    python3 bench_trace_torch.py [ITERATIONS]

Each iteration launches one small elementwise kernel (x.add_(1) on 16 floats), so the
time per iteration is the framework's launch path plus whatever a tracer adds to its
driver calls. Prints per_iter_us=<microseconds> for the timed loop only (after a warm-up
of 2000 iterations and a synchronisation), so start-up and the tracer's analysis at exit
are not counted.
"""
import sys
import time

import torch


def main() -> int:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    if iterations <= 0:
        print("bench_trace_torch.py: ITERATIONS must be a positive integer", file=sys.stderr)
        return 2
    x = torch.zeros(16, device="cuda")
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iterations):
        x.add_(1)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    expected = 2000 + iterations
    if int(x[0].item()) != expected:
        print(f"bench_trace_torch.py: x[0] = {x[0].item()}, expected {expected}", file=sys.stderr)
        return 1
    print(f"per_iter_us={elapsed / iterations * 1e6:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
