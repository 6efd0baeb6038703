"""Per GPU: GEMM TFLOPS, device memory bandwidth, host-to-device copies and the PCIe link
sampled under those copies."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from toolkit.facts import nvidia

from .common import sh


def link_under_load(
    smi: str | None, index: int, work: Callable[[], None], settle_s: float = 0.5
) -> dict[str, Any] | None:
    """The PCIe link of GPU ``index`` sampled by nvidia-smi while ``work`` runs in a loop.

    An idle GPU lowers its link (nvidia-smi --help-query-gpu: the current link "may be reduced
    when the GPU is not in use"); under host-to-device copies it must run at its maximum.
    """
    if smi is None:
        return None
    stop = threading.Event()
    failed: list[str] = []

    def busy() -> None:
        try:
            while not stop.is_set():
                work()
        except Exception as err:  # reported with the sample, never raised from the thread
            failed.append(f"{type(err).__name__}: {err}")

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    try:
        time.sleep(settle_s)  # the link retrains within microseconds; let the copies start
        rc, stdout, _ = sh(nvidia.query_gpu(smi, nvidia.LINK_FIELDS, gpu=index))
    finally:
        stop.set()
        thread.join(timeout=60)
    rows = nvidia.parse_smi_csv(stdout, nvidia.LINK_FIELDS) if rc == 0 else []
    if failed or not rows:
        return {
            "gpu": index,
            "gen": None,
            "width": None,
            "error": failed[0] if failed else "no sample",
        }
    return {
        "gpu": index,
        "gen": nvidia.smi_int(rows[0]["pcie.link.gen.current"]),
        "width": nvidia.smi_int(rows[0]["pcie.link.width.current"]),
        "error": None,
    }


def gpu_perf(torch: Any, ngpus: int, spec: dict[str, Any], smi: str | None) -> dict[str, Any]:
    """GEMM TFLOPS (bf16), device memory bandwidth and pinned h2d bandwidth, per GPU, and the
    PCIe link sampled during the host-to-device copies."""
    out: dict[str, Any] = {
        "gemm": [],
        "mem_bw": [],
        "h2d": [],
        "pcie_under_load": [],
        "error": None,
    }
    n = int(spec.get("gemm_n", 8192))
    iters = int(spec.get("gpu_iters", 20))
    nbytes = int(spec.get("mem_bytes", 1 << 30))
    try:
        for index in range(ngpus):
            dev = torch.device("cuda", index)
            torch.cuda.set_device(dev)
            a = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
            b = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
            for _ in range(3):
                torch.matmul(a, b)
            torch.cuda.synchronize(dev)
            start = time.perf_counter()
            for _ in range(iters):
                torch.matmul(a, b)
            torch.cuda.synchronize(dev)
            out["gemm"].append(
                {"gpu": index, "tflops": 2 * n**3 * iters / (time.perf_counter() - start) / 1e12}
            )
            del a, b
            src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            dst.copy_(src)
            torch.cuda.synchronize(dev)
            start = time.perf_counter()
            for _ in range(iters):
                dst.copy_(src)
            torch.cuda.synchronize(dev)
            # A device-to-device copy reads and writes every byte.
            out["mem_bw"].append(
                {"gpu": index, "gbps": 2 * nbytes * iters / (time.perf_counter() - start) / 1e9}
            )
            del dst
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            src.copy_(host, non_blocking=True)
            torch.cuda.synchronize(dev)
            start = time.perf_counter()
            for _ in range(iters):
                src.copy_(host, non_blocking=True)
            torch.cuda.synchronize(dev)
            out["h2d"].append(
                {"gpu": index, "gbps": nbytes * iters / (time.perf_counter() - start) / 1e9}
            )

            def copy(src: Any = src, host: Any = host, dev: Any = dev) -> None:
                src.copy_(host, non_blocking=True)
                torch.cuda.synchronize(dev)

            sample = link_under_load(smi, index, copy)
            if sample is not None:
                out["pcie_under_load"].append(sample)
            del src, host
            torch.cuda.empty_cache()
    except Exception as err:
        out["error"] = f"{type(err).__name__}: {err}"
    return out
