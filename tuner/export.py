"""Export a tuned proxy recipe as a full-run recipe for a target model, hardware and GPU count.

`build_full_run` applies the rules of `tuner.scaling` to one trial's recipe and returns a
`FullRun`: the target `ModelArgs`, the full-run `Recipe`, the parallel layout, the schedule in
steps and samples, the modeled cost, and for every recipe field the rule that produced it
(``scaled`` / ``carried`` / ``chosen`` / ``user``) with its source. `tuner.formats` renders it.

    >>> full = export_study(study, Pick(kind="knee"), target)  # doctest: +SKIP
    >>> print(tuner.formats.render("megatron", full))          # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from trainers.model_args import ModelArgs
from trainers.recipe import Recipe
from trainers.schedules import STEP_BOUNDARIES, batch_size_at
from tuner import cost_model as cm
from tuner import records, scaling
from tuner.hardware import Hardware, get_hardware
from tuner.pick import Pick, Picked, TrialRecord, pick_trial

# The MFU (on executed FLOPs) at which the cost model reproduces DeepSeek-V3's 2.664M H800
# GPU-hours for 14.8T tokens with its fp8 recipe: cost_model.reference_mfu(671B, h800) = 0.237.
DEFAULT_MFU = 0.237
MFU_SOURCE = ("cost_model.reference_mfu: reproduces DeepSeek-V3's 2.664M H800 pre-training "
              "GPU-hours for 14.8T tokens (technical report, Table 1) with the fp8 recipe")


class ExportError(ValueError):
    """The request cannot be exported as asked (the message says why and what would work)."""


@dataclass(frozen=True, kw_only=True)
class FullRunTarget:
    """The full run asked for. ``tp``/``pp``/``ep`` fix degrees the planner would otherwise
    choose; ``global_batch`` (sequences) overrides B_opt."""

    model_args: ModelArgs
    name: str
    hardware: Hardware
    gpus: int
    tokens: int
    seq_len: int = 4096
    global_batch: int | None = None
    micro_batch: int = 1
    memory_fraction: float = 0.9
    mfu: float = DEFAULT_MFU
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None

    def __post_init__(self) -> None:
        for name in ("gpus", "tokens", "seq_len", "micro_batch"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v > 0):
                raise ValueError(f"{name}: must be a positive integer, but got {name}={v!r}.")
        for name in ("global_batch", "tp", "pp", "ep"):  # None: chosen by a rule
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int) and v > 0):
                raise ValueError(f"{name}: must be a positive integer, but got {name}={v!r}.")
        if not 0.0 < self.memory_fraction <= 1.0:
            raise ValueError(f"memory_fraction: must be in (0, 1], but got "
                             f"memory_fraction={self.memory_fraction!r}.")
        if not 0.0 < self.mfu <= 1.0:
            raise ValueError(f"mfu: must be in (0, 1], but got mfu={self.mfu!r}.")


@dataclass(frozen=True, kw_only=True)
class FullRun:
    """A full-run recipe with the rule behind every number."""

    model_args: ModelArgs
    recipe: Recipe
    plan: cm.ParallelPlan
    target: FullRunTarget
    steps: scaling.StepCounts
    hidden_lr: float
    rules: list[scaling.Rule]
    cost: dict[str, Any]
    proxy: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The native export (JSON-safe)."""
        t = self.target
        return {
            "format": "moetune.full_run/1",
            "target": {"name": t.name, "hardware": t.hardware.name, "gpus": t.gpus,
                       "tokens": t.tokens, "seq_len": t.seq_len, "micro_batch": t.micro_batch,
                       "memory_fraction": t.memory_fraction},
            "model_args": self.model_args.to_dict(),
            "recipe": self.recipe.to_dict(),
            "lr": {"lr": self.recipe.lr, "hidden_lr": self.hidden_lr,
                   "min_lr": self.recipe.lr * self.recipe.min_lr_ratio,
                   "mup": bool(self.model_args.mup_base_dim)},
            "parallelism": dataclasses.asdict(self.plan) | {"expert_dp": self.plan.expert_dp,
                                                           "expert_tp": 1},
            "schedule": dataclasses.asdict(self.steps) | {
                "batch": describe_batch_schedule(self.recipe, t.tokens, self.steps),
                "ramp_end_fraction": ramp_end_fraction(self.recipe)},
            "rules": [r.to_dict() for r in self.rules],
            "cost": self.cost,
            "proxy": self.proxy,
            "warnings": list(self.warnings),
        }


def load_target(spec: str) -> tuple[ModelArgs, str]:
    """A target model from a DeepSeek-style config JSON path or a `trainers.preset` name.

    Raises:
        ValueError: neither an existing file nor a known preset.
    """
    path = Path(spec)
    if path.suffix == ".json" or path.exists():
        return ModelArgs.from_json(path), path.stem.removeprefix("config_")
    try:
        from trainers import preset  # the proxy presets; absent until trainers.presets lands
    except ImportError:
        raise ValueError(f"target: {spec!r} is not a config file, and presets are not "
                         "available in this install.") from None
    return preset(spec), spec


def _target_args(proxy: ModelArgs, target: ModelArgs) -> ModelArgs:
    """Target architecture; a µP study keeps its base width so the multipliers carry over."""
    if proxy.mup_base_dim and not target.mup_base_dim:
        return dataclasses.replace(target, mup_base_dim=proxy.mup_base_dim)
    return target


def _plan(args: ModelArgs, t: FullRunTarget, precision: str) -> scaling.PlanChoice:
    kw = dict(seq_len=t.seq_len, micro_batch=t.micro_batch, precision=precision,
              fraction=t.memory_fraction)
    choice = scaling.plan_parallelism(args, t.gpus, t.hardware, tp=t.tp, pp=t.pp, ep=t.ep, **kw)
    if choice is not None:
        return choice
    fixed = {k: v for k, v in (("tp", t.tp), ("pp", t.pp), ("ep", t.ep)) if v is not None}
    if fixed and not scaling.candidate_plans(args, t.gpus, t.hardware, tp=t.tp, pp=t.pp,
                                             ep=t.ep):
        # no layout has these degrees at all: a rule is broken, memory is not the reason
        given = " ".join(f"--{k} {v}" for k, v in fixed.items())
        raise ExportError(
            f"{given}: no layout of {t.gpus} GPUs has these degrees. The rules: tp divides "
            f"--gpus and n_heads={args.n_heads} and is at most {t.hardware.gpus_per_node} (GPUs "
            f"per node); pp divides --gpus/tp and is at most n_layers={args.n_layers}; ep "
            f"divides n_routed_experts={args.n_routed_experts} and tp*dp.")
    held = f" with {fixed}" if fixed else ""
    msg = (f"no parallel layout of {t.gpus} x {t.hardware.name}{held} fits "
           f"{t.memory_fraction:.0%} of {t.hardware.memory_gib:.1f} GiB per GPU, even with full "
           f"recompute (modeled).")
    if fixed:
        free = scaling.plan_parallelism(args, t.gpus, t.hardware, **kw)
        if free is not None:
            raise ExportError(f"{msg} Without fixing {sorted(fixed)}: {free.plan} fits with "
                              f"checkpoint_ratio {free.checkpoint_ratio:.3g}.")
    proposal = scaling.propose_gpus(args, t.gpus, t.hardware, **kw)
    if proposal:
        gpus, c = proposal
        raise ExportError(f"{msg} {gpus} GPUs would fit: {c.plan} with checkpoint_ratio "
                          f"{c.checkpoint_ratio:.3g} ({c.peak_gib:.1f} GiB).")
    raise ExportError(f"{msg} Nothing up to {64 * t.gpus} GPUs fits either.")


def ramp_end_fraction(recipe: Recipe) -> float:
    """Fraction of tokens after which the batch stops changing: the ramp length of a
    ``linear`` schedule, the last stage change of a ``step`` one, 0 for a constant batch (and
    for a ramp whose start equals its end)."""
    if recipe.batch_schedule == "constant" or recipe.batch_start >= recipe.batch_end:
        return 0.0
    if recipe.batch_schedule == "linear":
        return recipe.batch_ramp_fraction
    return STEP_BOUNDARIES[-1]


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.3g}%"


def describe_batch_schedule(recipe: Recipe, tokens: int, steps: scaling.StepCounts) -> str:
    """The batch schedule in words, the same in every format, e.g. ``linear ramp 2048 -> 7680
    sequences over the first 10% of tokens (ends at step 1234, after 5678 sequences)``."""
    r = recipe
    if ramp_end_fraction(r) == 0.0:
        return f"constant global batch {r.batch_end} sequences"
    if r.batch_schedule == "linear":
        return (f"linear ramp {r.batch_start} -> {r.batch_end} sequences over the first "
                f"{_pct(r.batch_ramp_fraction)} of tokens (ends at step {steps.ramp}, after "
                f"{steps.ramp_samples} sequences)")
    # the stage values as trainers.schedules computes them, so the text cannot drift from it
    stages = [f"{batch_size_at(r, math.ceil(b * tokens), tokens)} from {_pct(b)}"
              for b in STEP_BOUNDARIES]
    return (f"step schedule {r.batch_start} sequences, then {', then '.join(stages)} of tokens "
            f"(final batch from step {steps.ramp}, after {steps.ramp_samples} sequences)")


def schedule_steps(recipe: Recipe, tokens: int) -> scaling.StepCounts:
    """`scaling.step_counts` of the recipe's own batch schedule, with the ramp mark where that
    schedule's batch stops changing (``batch_ramp_fraction`` only describes ``linear``)."""
    walk = dataclasses.replace(recipe, batch_ramp_fraction=ramp_end_fraction(recipe))
    return scaling.step_counts(walk, tokens)


def constant_batch_steps(recipe: Recipe, tokens: int) -> scaling.StepCounts:
    """Step counts at a constant batch of ``recipe.batch_end``, for formats that cannot express
    a ramp: total × batch_end × seq_len covers ``tokens`` (within one step), and warmup and
    decay keep their fractions of tokens."""
    return schedule_steps(dataclasses.replace(recipe, batch_schedule="constant"), tokens)


def _carried_rules(proxy: Recipe, skip: set[str]) -> list[scaling.Rule]:
    return [scaling.Rule(field=f.name, value=getattr(proxy, f.name), kind="carried",
                         rule="copied from the proxy recipe (no transfer rule applies)")
            for f in dataclasses.fields(Recipe) if f.name not in skip]


def build_full_run(record: TrialRecord, target: FullRunTarget, *,
                   proxy_info: dict[str, Any] | None = None) -> FullRun:
    """Scale one trial's recipe to ``target``.

    Raises:
        ExportError: the precision has no tensor cores on the hardware, or no layout fits.
    """
    proxy, args = record.recipe, _target_args(record.model_args, target.model_args)
    precision = proxy.precision
    try:
        target.hardware.peak_tflops(precision)
    except ValueError as exc:
        raise ExportError(f"--hardware: {exc}") from None
    choice = _plan(args, target, precision)
    plan = choice.plan
    proxy_tokens = int(float(record.metrics.get("token_budget")
                             or record.metrics.get("tokens_trained") or 0))
    if proxy_tokens <= 0:
        raise ExportError(f"trial {record.number}: METRICS has no token_budget; cannot compute "
                          "the proxy's compute budget.")
    c_proxy = scaling.compute_budget(record.model_args, proxy.seq_len, proxy_tokens)
    c_full = scaling.compute_budget(args, target.seq_len, target.tokens)
    lr, hidden_lr, lr_rule = scaling.scale_lr(record.model_args, proxy.lr, c_proxy, args,
                                              c_full)
    multiple = plan.dp * target.micro_batch
    warnings = _warnings(record, proxy, target) + _check_global_batch(target, plan)
    start, end, batch_rules = scaling.scale_batch(
        proxy, c_full=c_full, seq_len=target.seq_len, multiple=multiple,
        global_batch=target.global_batch)
    if proxy.batch_schedule != "constant" and start == end:
        rule = next(r.rule for r in batch_rules if r.field == "batch_start")
        warnings.append(f"the tuned {proxy.batch_schedule!r} batch schedule collapsed to a "
                        f"constant batch of {end}: {rule.removeprefix('ramp collapsed: ')}.")
    recipe = dataclasses.replace(proxy, lr=lr, batch_start=start, batch_end=end,
                                 batch_multiple=multiple, seq_len=target.seq_len,
                                 micro_batch=target.micro_batch,
                                 checkpoint_ratio=choice.checkpoint_ratio)
    steps = schedule_steps(recipe, target.tokens)
    rules = [lr_rule, *batch_rules, scaling.warmup_rule(recipe, steps), *_fixed_rules(
        proxy, recipe, target, choice, steps)]
    rules += _carried_rules(proxy, {r.field for r in rules})
    return FullRun(model_args=args, recipe=recipe, plan=plan, target=target, steps=steps,
                   hidden_lr=hidden_lr, rules=rules, warnings=warnings,
                   cost=full_run_cost(args, recipe, plan, target, c_full),
                   proxy=(proxy_info or {}) | {"trial": record.number,
                                               "values": record.values,
                                               "tokens": proxy_tokens, "compute": c_proxy,
                                               "recipe": proxy.to_dict()})


def _fixed_rules(proxy: Recipe, recipe: Recipe, t: FullRunTarget, choice: scaling.PlanChoice,
                 steps: scaling.StepCounts) -> list[scaling.Rule]:
    R = scaling.Rule
    return [
        R(field="batch_ramp_fraction", value=recipe.batch_ramp_fraction, kind="carried",
          rule=f"batch schedule kept as fractions of tokens: "
               f"{describe_batch_schedule(recipe, t.tokens, steps)}"
               + ("" if recipe.batch_schedule == "linear" else
                  f"; the fraction is unused by the {recipe.batch_schedule!r} schedule")),
        R(field="decay_fraction", value=recipe.decay_fraction, kind="carried",
          rule=f"kept as a fraction of tokens ({recipe.decay}); "
               f"{scaling.lr_steps_note(recipe, steps)}"),
        R(field="seq_len", value=t.seq_len, kind="user", rule="--seq-len"),
        R(field="micro_batch", value=t.micro_batch, kind="user", rule="--micro-batch"),
        R(field="batch_multiple", value=recipe.batch_multiple, kind="chosen",
          rule=f"dp*micro_batch = {recipe.batch_multiple}: every data-parallel rank gets whole "
               f"micro batches, so the batches between start and end are rounded to it"),
        R(field="checkpoint_ratio", value=choice.checkpoint_ratio, kind="chosen",
          rule=(f"smallest whole-block ratio whose modeled peak ({choice.peak_gib:.1f} GiB) fits "
                f"{t.memory_fraction:.0%} of {t.hardware.memory_gib:.1f} GiB under "
                f"tp={choice.plan.tp} pp={choice.plan.pp} ep={choice.plan.ep} "
                f"dp={choice.plan.dp} (proxy used {proxy.checkpoint_ratio})"),
          source="tuner.cost_model.memory_per_gpu (modeled)"),
        R(field="precision", value=recipe.precision, kind="carried",
          rule="carried; fp8 maps to the blockwise recipe (1x128 activation tiles, 128x128 "
               "weight blocks, E4M3)" if recipe.precision == "fp8" else "carried",
          source="DeepSeek-V3 technical report, section 3.3"),
    ]


def _check_global_batch(t: FullRunTarget, plan: cm.ParallelPlan) -> list[str]:
    """--global-batch below dp*micro_batch is refused (every data-parallel rank needs a
    micro-batch); other values are rounded to a multiple of it, and the warning says so."""
    if t.global_batch is None:
        return []
    multiple = plan.dp * t.micro_batch
    if t.global_batch < multiple:
        raise ExportError(
            f"--global-batch: must be at least dp*micro_batch = {plan.dp}*{t.micro_batch} = "
            f"{multiple} sequences under the layout {plan} (each data-parallel rank takes a "
            f"micro-batch per step), but got --global-batch {t.global_batch}. Pass a larger "
            "--global-batch, or fix --tp/--pp to a layout with fewer data-parallel ranks.")
    rounded = scaling.round_to_multiple(t.global_batch, multiple)
    if rounded == t.global_batch:
        return []
    return [f"--global-batch {t.global_batch} rounded to {rounded}: the global batch must be a "
            f"multiple of dp*micro_batch = {plan.dp}*{t.micro_batch} = {multiple}."]


def _warnings(record: TrialRecord, proxy: Recipe, t: FullRunTarget) -> list[str]:
    out = []
    if not record.feasible:
        out.append(f"trial {record.number} violates a study constraint.")
    if record.model_args.mup_base_dim:
        out.append("muP transfers LR across width, not across token horizon or batch size "
                   "(Tensor Programs V); the LR is not adjusted for the longer run.")
    if t.global_batch is None and proxy.batch_schedule != "constant":
        out.append("batch_end comes from B_opt, fitted on dense models (DeepSeek LLM); "
                   "check it against the proxy's tuned end batch.")
    return out


def full_run_cost(args: ModelArgs, recipe: Recipe, plan: cm.ParallelPlan, t: FullRunTarget,
                  c_full: float) -> dict[str, Any]:
    """Modeled size, memory and time of the full run (label: modeled)."""
    params = cm.count_params(args)
    mem = cm.memory_per_gpu(args, plan, seq_len=t.seq_len, micro_batch=t.micro_batch,
                            precision=recipe.precision,
                            checkpoint_ratio=recipe.checkpoint_ratio)
    f = cm.flops_per_token(args, t.seq_len, checkpoint_ratio=recipe.checkpoint_ratio)
    hours = cm.gpu_hours(args, tokens=t.tokens, seq_len=t.seq_len, hw=t.hardware,
                         precision=recipe.precision, mfu=t.mfu,
                         checkpoint_ratio=recipe.checkpoint_ratio)
    gib = 1.0 / cm.GIB
    return {
        "label": "modeled",
        "params": {"total": params.total, "active": params.active, "mtp": params.mtp_total},
        "compute_flops": c_full,
        "flops_per_token": {"model": f.model, "recompute": f.recompute, "total": f.total},
        "peak_memory_gib": {"total": mem.total * gib, "weights": mem.weights * gib,
                            "grads": mem.grads * gib, "optimizer": mem.optimizer * gib,
                            "activations": mem.activations * gib, "stage": mem.stage,
                            "capacity": t.hardware.memory_gib},
        "gpu_hours": hours, "wall_clock_days": hours / t.gpus / 24.0,
        "step_time_s_at_final_batch": cm.step_time_s(
            args, global_batch=recipe.batch_end, seq_len=t.seq_len, gpus=t.gpus,
            hw=t.hardware, precision=recipe.precision, mfu=t.mfu,
            checkpoint_ratio=recipe.checkpoint_ratio),
        "mfu": t.mfu, "mfu_source": MFU_SOURCE if t.mfu == DEFAULT_MFU else "--mfu",
        "not_modeled": "communication, pipeline bubbles, allocator fragmentation",
    }


def export_study(study: Any, pick: Pick, target: FullRunTarget) -> tuple[FullRun, Picked]:
    """Pick a trial of an Optuna ``study`` and scale it to ``target``."""
    picked = pick_trial(study, pick)
    info = {"study": study.study_name, "pick": pick.kind, "how": picked.how,
            "validation": study.user_attrs.get(records.VALIDATION)}
    full = build_full_run(picked.record, target, proxy_info=info)
    check = info["validation"]
    if check and not check.get("chosen_stays_on_top", True):
        full.warnings.append(f"transfer check (moetune validate, {check.get('scale')}x width): "
                             f"trial {check.get('chosen_trial')} did not stay on top; Spearman "
                             f"{check.get('spearman')}.")
    return full, picked


# ---------------------------------------------------------------------------------------------
# derived study metrics: the full-run cost of a proxy recipe, as objectives/constraints
# ---------------------------------------------------------------------------------------------

def _as_record(recipe: Recipe, proxy_args: ModelArgs, token_budget: int) -> TrialRecord:
    return TrialRecord(number=-1, values={}, recipe=recipe, model_args=proxy_args,
                       metrics={"token_budget": token_budget}, feasible=True, outcome="complete")


@functools.lru_cache(maxsize=256)
def _full_cost(recipe: Recipe, proxy_args: ModelArgs, target: FullRunTarget,
               token_budget: int) -> tuple[float, float]:
    """(peak GiB, GPU-hours) of the full run a recipe exports to; (inf, inf) if none fits."""
    try:
        full = build_full_run(_as_record(recipe, proxy_args, token_budget), target)
    except ExportError:
        return math.inf, math.inf
    return float(full.cost["peak_memory_gib"]["total"]), float(full.cost["gpu_hours"])


def full_peak_memory_gb(recipe: Recipe, proxy_args: ModelArgs, target: FullRunTarget, *,
                        token_budget: int) -> float:
    """Modeled per-GPU peak (GiB) of the full run this recipe exports to; inf if none fits.

    The checkpoint ratio is re-chosen for the full run, so this moves with what the recipe
    carries over (precision) and what the memory model must recompute to fit.
    """
    return _full_cost(recipe, proxy_args, target, token_budget)[0]


def full_gpu_hours(recipe: Recipe, proxy_args: ModelArgs, target: FullRunTarget, *,
                   token_budget: int) -> float:
    """Modeled GPU-hours of the full run this recipe exports to; inf if no layout fits."""
    return _full_cost(recipe, proxy_args, target, token_budget)[1]


# Full run assumed by the study metrics when the spec says nothing more: DeepSeek-V3's.
SPEC_DEFAULTS = {"hardware": "h800", "gpus": 2048, "tokens": int(14.8e12), "seq_len": 4096}


def target_from_spec(spec: Any) -> FullRunTarget:
    """The full run of a study: ``[model] full`` as the target, and hardware, gpus, tokens and
    seq_len from a ``full_run`` section when the spec has one, else `SPEC_DEFAULTS`.

    Raises:
        ValueError: the spec names no full model config.
    """
    path = getattr(getattr(spec, "model", None), "full", "")
    if not path:
        raise ValueError("full_peak_memory_gb / full_gpu_hours need [model] full = "
                         "<config JSON> in the study spec.")
    section = getattr(spec, "full_run", None)
    given = {k: getattr(section, k) for k in SPEC_DEFAULTS if getattr(section, k, None)}
    kw = SPEC_DEFAULTS | given
    args, name = load_target(path)
    return FullRunTarget(model_args=args, name=name, hardware=get_hardware(kw["hardware"]),
                         gpus=int(kw["gpus"]), tokens=int(kw["tokens"]),
                         seq_len=int(kw["seq_len"]))


def register_full_run_metrics(target: FullRunTarget | None = None) -> None:
    """Register ``full_peak_memory_gb`` and ``full_gpu_hours`` (label ``modeled``) in
    `tuner.objectives`, so a study can trade proxy loss against full-run cost.

    With ``target`` the metrics use it; without, each trial's spec gives it
    (`target_from_spec`). This module registers the spec-driven pair when imported.
    """
    from tuner.objectives import Metric, register_metric

    def resolve(ctx: Any) -> FullRunTarget:
        return target if target is not None else _spec_target(ctx.spec)

    def mem(result: Any, ctx: Any) -> float:
        return full_peak_memory_gb(ctx.recipe, ctx.model_args, resolve(ctx),
                                   token_budget=result.token_budget)

    def hours(result: Any, ctx: Any) -> float:
        return full_gpu_hours(ctx.recipe, ctx.model_args, resolve(ctx),
                              token_budget=result.token_budget)

    where = (f"{target.gpus} x {target.hardware.name} for {target.name}" if target else
             "the spec's [model] full config (default run: 2048 x h800, 14.8T tokens)")
    for name, fn, desc in (("full_peak_memory_gb", mem, "modeled per-GPU peak of the full run"
                            " (GiB)"),
                           ("full_gpu_hours", hours, "modeled GPU-hours of the full run")):
        register_metric(Metric(name=name, fn=fn, direction="minimize", label="modeled",
                               description=f"{desc}, {where}"), replace=True)


@functools.lru_cache(maxsize=8)
def _spec_target_cached(path: str, full_run: tuple[tuple[str, Any], ...]) -> FullRunTarget:
    spec = SimpleNamespace(model=SimpleNamespace(full=path),
                           full_run=SimpleNamespace(**dict(full_run)))
    return target_from_spec(spec)


def _spec_target(spec: Any) -> FullRunTarget:
    section = getattr(spec, "full_run", None)
    items = tuple((k, getattr(section, k, None)) for k in SPEC_DEFAULTS)
    return _spec_target_cached(getattr(getattr(spec, "model", None), "full", ""), items)


register_full_run_metrics()
