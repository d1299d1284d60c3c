# SPDX-License-Identifier: Apache-2.0
"""Launch cost through cuda.core (Python), measured like bench_launch.cpp:
an empty kernel from the same CUBIN, 200 launches per round behind a 3 ms
spinning kernel, 61 rounds after warm-up, submission loop timed, stream
synchronised untimed, median.
Usage: python3 bench_launch_cudacore.py KERNELS.cubin [OUT.md]"""
import statistics
import sys
import time

try:
    from cuda.core import Device, LaunchConfig, ObjectCode, launch
except ImportError:  # cuda.core before 0.4 kept these under .experimental
    from cuda.core.experimental import Device, LaunchConfig, ObjectCode, launch

dev = Device(0)
dev.set_current()
stream = dev.create_stream()
code = ObjectCode.from_cubin(open(sys.argv[1], "rb").read())
kernel = code.get_kernel("empty")
spin = code.get_kernel("spin_then_write")
sink = dev.allocate(4, stream=stream)
import ctypes
config = LaunchConfig(grid=1, block=32)
PER_ROUND = 200
samples = []
for r in range(71):
    # queue behind a busy GPU (untimed), as bench_launch does
    launch(stream, LaunchConfig(grid=1, block=1), spin, ctypes.c_uint64(3000000), sink, ctypes.c_uint32(1))
    t0 = time.perf_counter()
    for _ in range(PER_ROUND):
        launch(stream, config, kernel)
    us = (time.perf_counter() - t0) * 1e6 / PER_ROUND
    stream.sync()
    if r >= 10:
        samples.append(us)
line = "| cuda.core launch (Python) | %.3f us |\n" % statistics.median(samples)
sys.stdout.write(line)
if len(sys.argv) > 2:
    with open(sys.argv[2], "a") as f:
        f.write(line)
