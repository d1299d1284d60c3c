# SPDX-License-Identifier: Apache-2.0
"""PyTorch on the Runtime API it finds: the same steps under the real cudart
and under libdrvshim_cudart (tools/gpu/torch-on-drvshim.sh runs both and
diffs them). Each step prints one line: its name and a result that does not
depend on timing, or the error that stopped it; a failed step does not stop
the next ones that do not depend on it.

  python3 torch_on_drvshim.py
"""
import sys
import traceback

import torch


def step(name, fn):
    try:
        result = fn()
        print(f"{name}: {result}", flush=True)
        return True
    except Exception as e:  # noqa: BLE001 (the report is the point)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"{name}: FAILED {type(e).__name__}: {first}", flush=True)
        traceback.print_exc(file=sys.stderr)
        return False


def main():
    torch.manual_seed(0)
    step("device available", lambda: torch.cuda.is_available())
    step("device count", lambda: torch.cuda.device_count())
    step("device name", lambda: torch.cuda.get_device_name(0))
    step("multiprocessors", lambda: torch.cuda.get_device_properties(0).multi_processor_count)
    step("capability", lambda: torch.cuda.get_device_capability(0))
    state = {}

    def allocate():
        state["x"] = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
        return float(state["x"].sum().item())

    if not step("allocate and reduce", allocate):
        return 1
    step("memory allocated (MiB)", lambda: torch.cuda.memory_allocated() >> 20)

    def streams_and_events():
        s = torch.cuda.Stream()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(s):
            start.record()
            y = state["x"] * 2
            end.record()
        end.synchronize()
        torch.cuda.current_stream().wait_stream(s)
        return float(y[-1].item()), start.elapsed_time(end) >= 0

    step("stream, events, timing", streams_and_events)

    def copies():
        pinned = torch.empty(1 << 20, dtype=torch.float32, pin_memory=True)
        pinned.copy_(state["x"], non_blocking=True)
        torch.cuda.synchronize()
        back = pinned.to("cuda", non_blocking=True)
        return float(pinned[12345].item()), bool(torch.equal(back, state["x"])), bool(pinned.is_pinned())

    step("pinned copies both ways", copies)

    def matmul():
        a = torch.randn(256, 256, device="cuda")
        b = torch.randn(256, 256, device="cuda")
        c = a @ b
        ref = (a.double().cpu() @ b.double().cpu()).float()
        return bool(torch.allclose(c.cpu(), ref, rtol=1e-3, atol=1e-3))

    step("matrix product (cuBLAS)", matmul)

    def training():
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        xs = torch.randn(128, 32, device="cuda")
        ys = xs.sum(dim=1, keepdim=True) * 0.1
        losses = []
        for _ in range(20):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(xs), ys)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return f"{losses[0]:.4f} -> {losses[-1]:.4f}"

    step("training loop (20 SGD steps)", training)

    def graphs():
        torch.manual_seed(2)
        model = torch.nn.Linear(16, 16).cuda()
        static_in = torch.randn(8, 16, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(static_in)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(static_in)
        results = []
        for i in range(3):
            static_in.copy_(torch.full((8, 16), float(i), device="cuda"))
            g.replay()
            results.append(round(float(static_out.sum().item()), 3))
        eager = round(float(model(static_in).sum().item()), 3)
        return f"replays {results}, eager {eager}, match {results[-1] == eager}"

    step("CUDA graph capture and replay", graphs)
    step("synchronize", lambda: torch.cuda.synchronize() or "ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
