"""The full run's fp8 speed, modeled per GEMM shape and per pass from published kernel figures.

A block Linear with weight (n out, k in) on m tokens runs three GEMMs per training step, each
2·m·n·k FLOPs: forward ``Y = X·Wᵀ``, input gradient (dgrad) ``dX = dY·W`` and weight gradient
(wgrad) ``dW = dYᵀ·X``. Each pass is priced as a roofline (torchao's method,
pytorch/ao@36027d82 ``torchao/testing/training/roofline_utils.py``):

    bf16 pass  max(2mnk / R_bf16, 2·(inputs + output) / BW)
    fp8 pass   max(2mnk / R_fp8[pass], (inputs + 2·output) / BW) + (3 + 4/128)·inputs / BW
    inputs     forward X (mk) and W (nk), dgrad dY (mn) and W, wgrad dY and X; the output is
               the third of mk, nk, mn, written in bf16. Each fp8 input is first quantized:
               read bf16, write E4M3 and one fp32 scale per 128 elements (as torchao's
               blockwise kernels do; DeepSeek-V3 section 3.5.2 describes the same
               read-quantize-write-read round trip on H800)
    speed-up   bf16 pass time / fp8 pass time

The rates are fractions of the part's dense peaks, taken from published H100 measurements
(`BLOCKWISE_H100`); as fractions they carry to the other Hopper parts, the H800 (the H100 SXM's
SMs, tensor cores and HBM3, with NVLink cut to 400 GB/s, which a GEMM does not use) and the H200
(the same compute, more and faster HBM). Blockwise fp8 grouped GEMMs (1×128 activation tiles,
128×128 weight blocks, DeepGEMM back end) at DeepSeek-V3's expert shape reach 1234 (forward),
1236 (dgrad) and 457 (wgrad) TFLOP/s, the quantization kernels 2390-2809 GB/s (pytorch/ao@260ac851
``benchmarks/prototype/blockwise_fp8_training/README.md``, "H100 results"); bf16 GEMMs reach
78% of the bf16 peak on large inputs (``roofline_utils.py``, ``pct_achievable_gemm_tops``).
DeepGEMM's own H800 forward figures at DeepSeek-V3 shapes, 1127-1520 TFLOP/s for M = 4096
(deepseek-ai/DeepGEMM@989c9e36 ``README.md``), bracket the forward rate used here.

A pass where fp8 does not pay at its shape runs in bf16 (speed-up 1): the published practice of
converting only what gains — torchao's H100 auto-filter keeps a Linear in bf16 below
N ≤ 2048, K ≤ 1024 or (N ≤ 4096 and K ≤ 2048) (pytorch/ao@36027d82
``torchao/float8/float8_linear_utils.py``, ``_auto_filter_for_rowwise``; `auto_filter_skips`),
and its ``rowwise_with_gw_hp`` recipe keeps the weight-gradient GEMM in bf16. With the figures
above the wgrad kernel never beats bf16, so the priced plan is fp8 forward and dgrad with a bf16
wgrad; the proxy's fp8 trials quantize all three GEMMs (DeepSeek-V3's recipe, section 3.3), so
their val_loss is that of the lower-precision plan.

End to end, published fp8 gains are 1.10× (rowwise) and 1.25× (tensorwise) for Llama-3 8B on
8×H100 (pytorch/ao@36027d82 ``docs/source/workflows/training.md``); `Fp8Speed.train` for
DeepSeek-V3 at its published layout lands in that range (tests/tuner/test_fp8_speed.py).
Everything here is *modeled*.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainers.config.model_args import ModelArgs
from tuner.modeling.hardware import Hardware

PASSES = ("fwd", "dgrad", "wgrad")
SCALE_BYTES_PER_ELEMENT = 3.0 + 4.0 / 128  # bf16 read, E4M3 write, fp32 scale per 128


@dataclass(frozen=True, kw_only=True)
class KernelFigures:
    """Published kernel rates as fractions of a part's peaks (rate / peak on the part measured).

    Fields:
        fp8_fraction: per pass, achieved fp8 GEMM TFLOP/s / dense fp8 peak.
        bf16_fraction: achieved bf16 GEMM TFLOP/s / dense bf16 peak.
        bandwidth_fraction: achieved bytes/s of the quantization kernels / HBM peak.
        source: where the figures come from (said in exports); ``short`` for report labels.
    """

    name: str
    fp8_fraction: dict[str, float]
    bf16_fraction: float
    bandwidth_fraction: float
    source: str
    short: str


_H100_FP8_PEAK, _H100_HBM = 1978.9, 3352.3  # TFLOP/s dense; GB/s as torchao's table reports it
BLOCKWISE_H100 = KernelFigures(
    name="blockwise-h100",
    fp8_fraction={"fwd": 1234 / _H100_FP8_PEAK, "dgrad": 1236 / _H100_FP8_PEAK,
                  "wgrad": 457 / _H100_FP8_PEAK},
    bf16_fraction=0.78,
    # median of the six cast kernels of that table (2390-2809 GB/s)
    bandwidth_fraction=2685.5 / _H100_HBM,
    source=("torchao blockwise fp8 grouped GEMMs on H100 at DeepSeek-V3's expert shape "
            "(fwd 1234, dgrad 1236, wgrad 457 TFLOP/s; casts 2.69 TB/s; pytorch/ao@260ac851 "
            "benchmarks/prototype/blockwise_fp8_training/README.md) against bf16 at 78% of "
            "peak (torchao roofline_utils); a pass where fp8 does not pay runs bf16; as "
            "fractions of the dense peak they stand for H800 too, which has the H100 SXM's "
            "tensor cores and HBM and differs in NVLink only, which a GEMM does not use"),
    short=("published blockwise fp8 kernel figures (torchao, H100: fwd 1234, dgrad 1236, wgrad "
           "457 TFLOP/s; as shares of the peak they stand for H800, the same tensor cores) per "
           "GEMM shape and pass, tuner.modeling.fp8_speed"),
)


@dataclass(frozen=True, kw_only=True)
class Gemm:
    """One block Linear of the full run: weight (n, k), ``m`` tokens per GEMM call, and its
    training FLOPs per token of the model (all three passes, all its uses per token)."""

    name: str
    m: int
    n: int
    k: int
    flops_per_token: float


def auto_filter_skips(n: int, k: int) -> bool:
    """Whether torchao's H100 auto-filter keeps a Linear with weight (n, k) in bf16 (rowwise
    recipe): it does not pay below these sizes on H100 (``_auto_filter_for_rowwise``)."""
    return n <= 2048 or k <= 1024 or (n <= 4096 and k <= 2048)


def _operands(m: int, n: int, k: int, pass_: str) -> tuple[int, int]:
    """(input elements, output elements) of one pass."""
    x, w, y = m * k, n * k, m * n
    return {"fwd": (x + w, y), "dgrad": (y + w, x), "wgrad": (y + x, w)}[pass_]


def pass_seconds(m: int, n: int, k: int, pass_: str, precision: str, hw: Hardware, *,
                 figures: KernelFigures = BLOCKWISE_H100) -> float:
    """Modeled seconds of one pass of an (m, n, k) GEMM in ``precision`` (bf16 or fp8).

    Raises:
        ValueError: unknown pass or precision, or fp8 on a part without fp8 tensor cores.
    """
    if pass_ not in PASSES:
        raise ValueError(f"pass: must be one of {PASSES}, but got pass={pass_!r}.")
    if precision not in ("bf16", "fp8"):
        raise ValueError(f"precision: must be 'bf16' or 'fp8', but got {precision!r}.")
    flops, bw = 2.0 * m * n * k, hw.mem_bw_tbps * 1e12 * figures.bandwidth_fraction
    inputs, output = _operands(m, n, k, pass_)
    if precision == "bf16":
        rate = hw.peak_tflops("bf16") * 1e12 * figures.bf16_fraction
        return max(flops / rate, 2.0 * (inputs + output) / bw)
    rate = hw.peak_tflops("fp8") * 1e12 * figures.fp8_fraction[pass_]
    gemm = max(flops / rate, (inputs + 2.0 * output) / bw)
    return gemm + SCALE_BYTES_PER_ELEMENT * inputs / bw


def kernel_speedup(m: int, n: int, k: int, pass_: str, hw: Hardware, *,
                   figures: KernelFigures = BLOCKWISE_H100) -> float:
    """bf16 time / fp8 time of one pass (below 1 where the fp8 kernels lose)."""
    return (pass_seconds(m, n, k, pass_, "bf16", hw, figures=figures)
            / pass_seconds(m, n, k, pass_, "fp8", hw, figures=figures))


@dataclass(frozen=True, kw_only=True)
class GemmSpeed:
    """A GEMM's kernel speed-up per pass and the speed-up priced (fp8 only where it pays)."""

    gemm: Gemm
    kernel: dict[str, float]

    @property
    def priced(self) -> dict[str, float]:
        return {p: max(1.0, s) for p, s in self.kernel.items()}

    @property
    def train(self) -> float:
        """Speed-up of its three passes together (equal FLOPs each)."""
        return 3.0 / sum(1.0 / s for s in self.priced.values())


@dataclass(frozen=True, kw_only=True)
class Fp8Speed:
    """The block matmuls' modeled fp8 speed-up over bf16, FLOP-weighted over the GEMMs.

    ``train``: all three passes (what a training step's block matmuls gain); ``forward``: the
    forward pass alone (what recomputation gains).
    """

    gemms: list[GemmSpeed]
    source: str

    def _weighted(self, *, forward: bool) -> float:
        total = sum(g.gemm.flops_per_token for g in self.gemms)
        time = sum(g.gemm.flops_per_token / (g.priced["fwd"] if forward else g.train)
                   for g in self.gemms)
        return total / time if time else 1.0

    @property
    def train(self) -> float:
        return self._weighted(forward=False)

    @property
    def forward(self) -> float:
        return self._weighted(forward=True)

    def to_dict(self) -> dict[str, object]:
        return {"label": "modeled", "source": f"fp8 speed: modeled from {self.source}",
                "train_speedup": self.train, "forward_speedup": self.forward,
                "gemms": [{"name": g.gemm.name, "m": g.gemm.m, "n": g.gemm.n, "k": g.gemm.k,
                           "kernel_speedup": g.kernel, "priced_speedup": g.priced}
                          for g in self.gemms]}


def block_gemms(a: ModelArgs, *, tokens: int, ep: int = 1, tp: int = 1,
                include_mtp: bool = True) -> list[Gemm]:
    """The block Linears of ``a`` with their GEMM shapes on one GPU.

    ``tokens``: tokens of one micro-batch (seq_len × micro_batch). Routed experts see
    tokens·k·ep/E tokens each (every one of ep ranks dispatches its k assignments per token
    over all E experts); tensor parallelism splits column-parallel n and row-parallel k by tp.
    The FLOPs per token add up to `cost_model.flops_per_token(...).block_matmul`.
    """
    h, d = a.n_heads, a.dim
    depth = a.mtp_depth if include_mtp else 0
    n_moe = a.n_moe_layers + depth
    per_layer = a.n_layers + depth
    out: list[Gemm] = []

    def add(name: str, n: int, k: int, uses: float, *, m: int = tokens, split: str = "") -> None:
        n_, k_ = (n // tp if split == "n" else n), (k // tp if split == "k" else k)
        out.append(Gemm(name=name, m=max(1, m), n=max(1, n_), k=max(1, k_),
                        flops_per_token=6.0 * n * k * uses))

    if a.q_lora_rank:
        add("attn.wq_a", a.q_lora_rank, d, per_layer)
        add("attn.wq_b", h * a.qk_head_dim, a.q_lora_rank, per_layer, split="n")
    else:
        add("attn.wq", h * a.qk_head_dim, d, per_layer, split="n")
    add("attn.wkv_a", a.kv_lora_rank + a.qk_rope_head_dim, d, per_layer)
    add("attn.wkv_b", h * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, per_layer,
        split="n")
    add("attn.wo", d, h * a.v_head_dim, per_layer, split="k")
    if a.n_dense_layers:
        add("mlp.w1+w3", a.inter_dim, d, 2 * a.n_dense_layers, split="n")
        add("mlp.w2", d, a.inter_dim, a.n_dense_layers, split="k")
    if n_moe:
        m_expert = tokens * a.n_activated_experts * ep // a.n_routed_experts
        uses = a.n_activated_experts * n_moe
        add("experts.w1+w3", a.moe_inter_dim, d, 2 * uses, m=m_expert)
        add("experts.w2", d, a.moe_inter_dim, uses, m=m_expert)
        if a.n_shared_experts:
            width = a.n_shared_experts * a.moe_inter_dim
            add("shared.w1+w3", width, d, 2 * n_moe, split="n")
            add("shared.w2", d, width, n_moe, split="k")
    if depth:
        add("mtp.proj", d, 2 * d, depth)
    return out


def fp8_speed(a: ModelArgs, hw: Hardware, *, tokens: int, ep: int = 1, tp: int = 1,
              include_mtp: bool = True, figures: KernelFigures = BLOCKWISE_H100) -> Fp8Speed:
    """The modeled fp8 speed-up of ``a``'s block matmuls on ``hw`` (see the module docstring).

    Example:
        >>> s = fp8_speed(ModelArgs.from_json("config_671B.json"), get_hardware("h800"),
        ...               tokens=4096, ep=64)  # doctest: +SKIP
        >>> round(s.train, 2)  # doctest: +SKIP
        1.18

    Raises:
        ValueError: ``hw`` has no fp8 tensor cores.
    """
    gemms = [GemmSpeed(gemm=g, kernel={p: kernel_speedup(g.m, g.n, g.k, p, hw, figures=figures)
                                       for p in PASSES})
             for g in block_gemms(a, tokens=tokens, ep=ep, tp=tp, include_mtp=include_mtp)]
    return Fp8Speed(gemms=gemms, source=figures.source)
