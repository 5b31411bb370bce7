"""Accelerators the full-scale cost model knows: memory and peak dense tensor-core rates, as data.

Rates are NVIDIA's published *dense* (no 2:4 sparsity) peaks for the SXM parts, in TFLOP/s;
HBM bandwidth is the datasheet's; memory is the capacity the CUDA driver reports (``nvidia-smi``
total, MiB → GiB), which is what an allocator can ever see. H800 is the export variant of H100
SXM: same compute, lower NVLink bandwidth (the cost model ignores interconnect, so the two
differ only in name here).

    >>> get_hardware("h800").peak_tflops("fp8")
    1978.9
"""

from __future__ import annotations

from dataclasses import dataclass

from trainers.result import GIB

PRECISION_RATE = {"fp32": "tf32", "bf16": "bf16", "fp8": "fp8"}  # recipe precision → GEMM rate


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """One accelerator model.

    Fields:
        memory_gib: device memory as the driver reports it (GiB).
        peak_bf16_tflops / peak_fp8_tflops / peak_tf32_tflops: dense tensor-core peaks;
            ``None`` where the part has no such tensor cores (A100 has no FP8).
        mem_bw_tbps: HBM bandwidth (TB/s), which prices fp8's quantization casts
            (`tuner.modeling.fp8_speed`).
        gpus_per_node: GPUs behind one NVLink switch (the planner keeps tensor parallelism inside).
        source: where the numbers come from.
    """

    name: str
    memory_gib: float
    peak_bf16_tflops: float
    peak_fp8_tflops: float | None
    peak_tf32_tflops: float
    mem_bw_tbps: float
    gpus_per_node: int = 8
    source: str = ""

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for the GEMMs of a recipe with ``precision`` (fp32 recipes run TF32).

        Raises:
            ValueError: unknown precision, or fp8 on a part without FP8 tensor cores.
        """
        if precision not in PRECISION_RATE:
            raise ValueError(f"precision: must be one of {tuple(PRECISION_RATE)}, but got "
                             f"precision={precision!r}.")
        rate = {"tf32": self.peak_tf32_tflops, "bf16": self.peak_bf16_tflops,
                "fp8": self.peak_fp8_tflops}[PRECISION_RATE[precision]]
        if rate is None:
            raise ValueError(f"hardware {self.name!r} has no {precision} tensor cores; "
                             f"choose another --hardware or precision.")
        return rate


_HOPPER = "NVIDIA H100 Tensor Core GPU datasheet (SXM, dense)"
HARDWARE: dict[str, Hardware] = {
    "h800": Hardware(name="h800", memory_gib=79.65, peak_bf16_tflops=989.4,
                     peak_fp8_tflops=1978.9, peak_tf32_tflops=494.7,
                     mem_bw_tbps=3.35,
                     source=f"{_HOPPER}; H800 = H100 SXM compute, reduced NVLink; 81559 MiB"),
    "h100": Hardware(name="h100", memory_gib=79.65, peak_bf16_tflops=989.4,
                     peak_fp8_tflops=1978.9, peak_tf32_tflops=494.7,
                     mem_bw_tbps=3.35, source=f"{_HOPPER}; 81559 MiB"),
    "h200": Hardware(name="h200", memory_gib=140.4, peak_bf16_tflops=989.4,
                     peak_fp8_tflops=1978.9, peak_tf32_tflops=494.7,
                     mem_bw_tbps=4.8,
                     source="NVIDIA H200 datasheet (SXM, dense; H100 compute); 143771 MiB"),
    "a100": Hardware(name="a100", memory_gib=80.0, peak_bf16_tflops=312.0,
                     peak_fp8_tflops=None, peak_tf32_tflops=156.0,
                     mem_bw_tbps=2.039,
                     source="NVIDIA A100 datasheet (SXM 80GB, dense); 81920 MiB"),
}


def get_hardware(name: str) -> Hardware:
    """The registered accelerator ``name`` (case-insensitive).

    Raises:
        ValueError: unknown name; the message lists the valid ones.
    """
    try:
        return HARDWARE[name.lower()]
    except KeyError:
        raise ValueError(f"hardware: unknown name {name!r}; valid names are "
                         f"{sorted(HARDWARE)}.") from None
