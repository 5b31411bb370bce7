"""A proxy recipe scaled to a full run: the target, the parallel layout, the schedule in steps
and the modeled cost, with the rule behind every number.

`build_full_run` applies the rules of `tuner.modeling.scaling` to one proxy recipe and returns a
`FullRun`: the target `ModelArgs`, the full-run `Recipe`, the parallel layout, the schedule in
steps and samples, the modeled cost, and for every recipe field the rule that produced it
(``scaled`` / ``carried`` / ``chosen`` / ``user``) with its source. Everything here is
*modeled*: pure functions of model, recipe, target and hardware. The study core computes the
``full_*`` metrics with it; `tuner.export` renders it as launch configs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from trainers.config.schedules import STEP_BOUNDARIES, batch_size_at
from trainers.config.validation import field_error, require
from trainers.presets import preset, preset_names
from tuner.modeling import cost_model as cm
from tuner.modeling import fp8_speed, references, scaling
from tuner.modeling.anchor.answer import (
    BatchAnswer,
    LrAnswer,
    answer_batch,
    answer_lr,
    shipped_prior,
)
from tuner.modeling.anchor.offset import Offset
from tuner.modeling.anchor.prior import SOURCE as PRIOR_SOURCE
from tuner.modeling.anchor.prior import Prior, RunPoint
from tuner.modeling.hardware import Hardware, get_hardware
from tuner.modeling.laws.interface import LrLaw
from tuner.modeling.laws.lr_at_batch import LawBatches, LrAtBatch, lr_at_batch
from tuner.modeling.laws.power_law import StudyLaw
from tuner.modeling.layout_rules import layout_errors
from tuner.modeling.targets import TARGETS, published_target

# The MFU (of the bf16 peak, fp8's modeled gain on top) at which the cost model reproduces
# DeepSeek-V3's 2.664M H800 GPU-hours for 14.8T tokens with its fp8 recipe at its 64-way expert
# parallelism: cost_model.reference_mfu(671B, h800) = 0.365.
DEFAULT_MFU = 0.365
MFU_SOURCE = ("cost_model.reference_mfu: reproduces DeepSeek-V3's 2.664M H800 pre-training "
              "GPU-hours for 14.8T tokens (technical report, Table 1) with the fp8 recipe, "
              "fp8 speed modeled from published kernel figures (tuner.modeling.fp8_speed)")


class ExportError(ValueError):
    """The full run cannot be built as asked (the message says why and what would work)."""


# Upper bounds far beyond any run (DeepSeek-V3: 2048 GPUs, 14.8e12 tokens, 4K sequences) that
# keep the planner's search over layouts of the GPUs, and the cost model's arithmetic, finite.
MAX_INT = {"gpus": 2**20, "seq_len": 2**20, "micro_batch": 2**16, "global_batch": 2**30,
           "tp": 2**10, "pp": 2**10, "ep": 2**16}
MAX_TOKENS = 1e16


@dataclass(frozen=True, kw_only=True)
class FullRunLimits:
    """The numbers of a full run, checked here once for every way of asking for one (a spec's
    ``[full_run]``, ``moetune export``'s flags, the service's export): a `FieldError` naming
    the field (``gpus``, ``tokens``, ...), the rule and the value. ``tokens`` may be given as a
    whole float (TOML and the command line read ``14.8e12`` as one) and is kept as an int;
    ``global_batch``/``tp``/``pp``/``ep`` None: chosen by a rule."""

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
        for name, most in MAX_INT.items():
            v = getattr(self, name)
            if v is None and name in ("global_batch", "tp", "pp", "ep"):
                continue
            require(isinstance(v, int) and not isinstance(v, bool) and v >= 1, name,
                    "must be a positive integer", v)
            require(v <= most, name, f"must be at most {most}", v)
        t = self.tokens
        require(isinstance(t, int | float) and not isinstance(t, bool) and t >= 1
                and float(t).is_integer(), "tokens", "must be a positive whole number", t)
        require(t <= MAX_TOKENS, "tokens", f"must be at most {MAX_TOKENS:g}", t)
        object.__setattr__(self, "tokens", int(t))
        for name in ("memory_fraction", "mfu"):
            v = getattr(self, name)
            require(isinstance(v, int | float) and not isinstance(v, bool) and 0.0 < v <= 1.0,
                    name, "must be in (0, 1]", v)


@dataclass(frozen=True, kw_only=True)
class FullRunTarget(FullRunLimits):
    """The full run asked for: the target model and hardware, and its `FullRunLimits` (checked
    at construction). ``tp``/``pp``/``ep`` fix degrees the planner would otherwise choose;
    ``global_batch`` (sequences) overrides B_opt."""

    model_args: ModelArgs
    name: str
    hardware: Hardware
    lr: float | None = None  # the user's LR (µP: the base LR), written instead of any rule's
    lr_at_fitted_batch: bool = False  # write a law's LR measured at another batch, labelled
    lr_wide_band: bool = False  # write an LR whose band at the full run is > LAW_BAND_LIMIT
    recipes: Path | None = None  # a team's own past full runs, added to the recipe table

    def __post_init__(self) -> None:
        super().__post_init__()
        v = self.lr
        require(v is None or (isinstance(v, int | float) and not isinstance(v, bool)
                              and math.isfinite(v) and v > 0), "lr",
                "must be a positive number", v)
        require(isinstance(self.lr_at_fitted_batch, bool), "lr_at_fitted_batch",
                "must be true or false", self.lr_at_fitted_batch)
        require(isinstance(self.lr_wide_band, bool), "lr_wide_band", "must be true or false",
                self.lr_wide_band)


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
    lr_at: LrAtBatch | None = None  # a law's LR at the final batch (`lr_at_batch`)
    lr_at_start: LrAtBatch | None = None  # ... and at a ramp's first batch
    backtest: list[dict[str, Any]] = field(default_factory=list)  # `tuner.export.backtest`
    answer: LrAnswer | None = None  # the anchored answer at the final batch
    batch_answer: BatchAnswer | None = None  # the final batch's, where no --global-batch
    answer_at_start: LrAnswer | None = None  # ... and at a ramp's first batch

    def lr_dict(self) -> dict[str, Any]:
        """The native export's ``lr``: the LR and the batch it is for, where a law measured it
        (``valid_at_batch``; None: at any batch, or no law), the law's band as numbers
        (``band``: lo, hi, level, decades past the fitted budgets in D and in B), the anchored
        answer (``answer``: its band, the prior's form and scatter, the law's weight) and, with
        a ramp, the answer at the ramp's first batch."""
        r, at = self.recipe, self.lr_at
        out: dict[str, Any] = {
            "lr": r.lr, "hidden_lr": self.hidden_lr, "min_lr": r.lr * r.min_lr_ratio,
            "mup": bool(self.model_args.mup_base_dim),
            "for_batch_tokens": r.batch_end * r.seq_len,
            "source": next((x.kind for x in self.rules if x.field == "lr"), ""),
            "valid_at_batch": at.valid_at_batch if at else None,
            "band": at.band_dict() if at else None}
        if self.answer_at_start is not None:
            a, s = self.answer_at_start, self.lr_at_start
            out["at_ramp_start"] = {"batch_tokens": a.batch, "lr": a.lr, "band": list(a.band),
                                    "law_lr": s.lr if s else None,
                                    "refusal": s.refusal if s else ""}
        if self.answer is not None:
            out["answer"] = self.answer.to_dict()
        return out

    def lr_line(self) -> str:
        """The LR's rule in one line, for a launch file's header (the native export has it as
        numbers, `lr_dict`): the batch it is for and what gave it, with a law's band and its
        distance past the fitted cells in D and in B, and a ramp start's LR beside it."""
        r = self.recipe
        rule = next((x.rule for x in self.rules if x.field == "lr"), "")
        what = (f"base lr {r.lr:.4g} (muP; the hidden matrices' {self.hidden_lr:.4g})"
                if self.model_args.mup_base_dim else f"lr {r.lr:.4g}")
        line = (f"{what} for the final batch, {r.batch_end} x {r.seq_len} = "
                f"{r.batch_end * r.seq_len:,} tokens per step: {rule}")
        a = self.answer_at_start
        if a is not None:
            line += (f"; at the ramp's first batch ({a.batch:,.0f} tokens per step) the anchored "
                     f"answer is lr {a.lr:.4g} (band [{a.band[0]:.3g}, {a.band[1]:.3g}])")
        return " ".join(line.split())  # one comment line in any launch file, whatever a rule holds

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
            "lr": self.lr_dict(),
            "parallelism": dataclasses.asdict(self.plan) | {"expert_dp": self.plan.expert_dp,
                                                           "expert_tp": 1},
            "schedule": dataclasses.asdict(self.steps) | {
                "batch": describe_batch_schedule(self.recipe, t.tokens, self.steps),
                "ramp_end_fraction": ramp_end_fraction(self.recipe)},
            "rules": [r.to_dict() for r in self.rules],
            "cost": self.cost,
            "proxy": self.proxy,
            "warnings": list(self.warnings),
        } | ({"backtest": self.backtest} if self.backtest else {})


def check_target(spec: str) -> None:
    """The rule of a target's name, read from no file: a published config (`targets.TARGETS`),
    a config JSON path (``*.json``) or a `trainers.preset` name.

    Raises:
        FieldError: none of these (``field`` ``target``); the message lists the valid names.
    """
    if spec.lower() in TARGETS or spec.endswith(".json"):
        return
    try:
        preset(spec)
        known = True
    except (ValueError, KeyError):
        known = False
    require(known, "target", f"must be a published config ({sorted(TARGETS)}), a config JSON "
            f"path or a proxy preset ({preset_names()})", spec)


def load_target(spec: str) -> tuple[ModelArgs, str]:
    """A target model: a published config by name (`targets.TARGETS`, e.g.
    ``deepseek-v3-671b``), a DeepSeek-style config JSON path, or a `trainers.preset` name.

    Raises:
        FieldError: none of these, or a file that cannot be read (``field`` ``target``).
        ValueError: a config JSON that `ModelArgs` refuses.
    """
    if spec.lower() in TARGETS:
        return published_target(spec)
    path = Path(spec)
    require(not path.is_dir(), "target", f"must be a config JSON file, a published config "
            f"({sorted(TARGETS)}) or a proxy preset, not a folder", spec)
    if path.suffix == ".json" or path.exists():
        try:
            return ModelArgs.from_json(path), path.stem.removeprefix("config_")
        except OSError as e:
            raise field_error("target", f"must be a readable file ({e.strerror or e})",
                              spec) from None
    check_target(spec)
    return preset(spec), spec


def _target_args(proxy: ModelArgs, target: ModelArgs, seq_len: int) -> ModelArgs:
    """Target architecture as the full run trains it; a µP study keeps its base width so the
    multipliers carry over, and a proxy that fixed its routing's group score (``group_score``)
    keeps it.

    The context is the run's: ``max_seq_len`` is ``seq_len`` and ``original_seq_len`` at least
    that. A published config carries its inference context (16384 tokens by YaRN, ``rope_factor``
    40 over the 4096 it was pre-trained at), which a pre-training run at ``seq_len`` does not
    use: YaRN applies whenever ``max_seq_len > original_seq_len`` (`trainers.nn.model`, as
    upstream's ``inference/model.py``), so every format describes plain RoPE at the run's length.
    """
    target = dataclasses.replace(target, max_seq_len=seq_len,
                                 original_seq_len=max(target.original_seq_len, seq_len))
    if proxy.group_score != "auto" and target.group_score == "auto":
        target = dataclasses.replace(target, group_score=proxy.group_score)
    if proxy.mup_base_dim and not target.mup_base_dim:
        return dataclasses.replace(target, mup_base_dim=proxy.mup_base_dim)
    return target


class _FitArgs(TypedDict):
    """The keyword arguments `scaling.plan_parallelism` and `scaling.propose_gpus` share."""

    seq_len: int
    micro_batch: int
    precision: str
    fraction: float


def _plan(args: ModelArgs, t: FullRunTarget, precision: str) -> scaling.PlanChoice:
    kw: _FitArgs = {"seq_len": t.seq_len, "micro_batch": t.micro_batch, "precision": precision,
                    "fraction": t.memory_fraction}
    choice = scaling.plan_parallelism(args, t.gpus, t.hardware, tp=t.tp, pp=t.pp, ep=t.ep, **kw)
    if choice is not None:
        return choice
    fixed = {k: v for k, v in (("tp", t.tp), ("pp", t.pp), ("ep", t.ep)) if v is not None}
    broken = layout_errors(args, t.gpus, tp=t.tp, pp=t.pp, ep=t.ep)
    if fixed and not broken and not scaling.candidate_plans(args, t.gpus, t.hardware, tp=t.tp,
                                                            pp=t.pp, ep=t.ep):
        given = " ".join(f"--{k} {v}" for k, v in fixed.items())
        broken = [f"{given}: ep must divide tp*dp = {t.gpus}/pp (Megatron-LM@d98e8a64 "
                  "parallel_state: world size divisible by expert_tensor_parallel*ep*pp)"]
    if broken:  # a launch rule is broken: no flag makes this layout valid, memory is moot
        raise ExportError(f"{'; '.join(broken)}. No launch config can make this layout valid; "
                          "leave the degree out to let the planner choose one.")
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
    # the stage values as trainers.config.schedules computes them, so the text cannot drift from it
    stages = [f"{batch_size_at(r, math.ceil(b * tokens), tokens)} from {_pct(b)}"
              for b in STEP_BOUNDARIES]
    return (f"step schedule {r.batch_start} sequences, then {', then '.join(stages)} of tokens "
            f"(final batch from step {steps.ramp}, after {steps.ramp_samples} sequences)")


def batch_levels(recipe: Recipe, tokens: int) -> list[tuple[int, int]]:
    """The batch schedule as (first sample, batch) pairs: from sample ``s`` on (``s`` sequences
    of ``recipe.seq_len`` consumed), steps take ``batch`` sequences until the next pair.

    Exactly `trainers.config.schedules.batch_size_at` at every whole sample count, so a consumer
    that looks the batch up by consumed samples (Megatron-LM's ``--step-batch-size-schedule``)
    walks the same steps as `scaling.step_counts`. One pair for a constant batch.
    """
    seq, last = recipe.seq_len, -(-tokens // recipe.seq_len)
    levels = [(0, batch_size_at(recipe, 0, tokens))]
    while True:
        lo, hi, batch = levels[-1][0], last, levels[-1][1]
        if batch_size_at(recipe, hi * seq, tokens) == batch:
            return levels
        while hi - lo > 1:  # the first sample whose batch differs (schedules are monotonic)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if batch_size_at(recipe, mid * seq, tokens) == batch else (lo, mid)
        levels.append((hi, batch_size_at(recipe, hi * seq, tokens)))


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


def run_point(args: ModelArgs, target: FullRunTarget, batch: float = 0.0) -> RunPoint:
    """The full run as the recipe table's prior reads it (non-embedding parameter counts)."""
    c = cm.count_params(args)
    emb = c.embedding + c.head
    return RunPoint(n_active=float(c.active - emb), n_total=float(c.total - emb),
                    layers=args.n_layers, dim=args.dim, seq_len=target.seq_len,
                    tokens=float(target.tokens), batch=batch)


def build_full_run(recipe: Recipe, model_args: ModelArgs, target: FullRunTarget, *,
                   proxy_tokens: int, proxy_info: dict[str, Any] | None = None,
                   law: StudyLaw | LrLaw | None = None,
                   law_batches: LawBatches | None = None,
                   offset: Offset | None = None) -> FullRun:
    """Scale one proxy recipe (trained on ``model_args`` for ``proxy_tokens``) to ``target``.

    The batch is decided first (``target.global_batch``, else the anchored answer's: the
    published recipes' prior combined with a law's batch law), then the LR at that batch:
    ``target.lr`` if given, else the anchored answer there (`tuner.modeling.anchor.answer`:
    the prior, moved by ``offset`` where it held and by the law's LR read at the final batch,
    `lr_at_batch`; ``law_batches``: the batches a law in D alone was fitted at).

    Raises:
        ExportError: the precision has no tensor cores on the hardware, or no layout fits,
            or ``proxy_tokens`` is not positive, or with a law the answer's band is wider than
            `LAW_BAND_LIMIT` and the target neither gives an LR nor accepts the band.
    """
    proxy, args = recipe, _target_args(model_args, target.model_args, target.seq_len)
    precision = proxy.precision
    try:
        target.hardware.peak_tflops(precision)
    except ValueError as exc:
        raise ExportError(f"--hardware: {exc}") from None
    choice = _plan(args, target, precision)
    plan = choice.plan
    if proxy_tokens <= 0:
        raise ExportError(f"proxy_tokens: must be > 0 (the proxy's token budget), but got "
                          f"{proxy_tokens}; cannot compute the proxy's compute budget.")
    c_proxy = scaling.compute_budget(model_args, proxy.seq_len, proxy_tokens)
    c_full = scaling.compute_budget(args, target.seq_len, target.tokens)
    one_var = law if isinstance(law, StudyLaw) else None  # a batch law B*(x) comes with it
    x_full = one_var.x(target.tokens, c_full / target.tokens) if one_var else 0.0
    multiple = plan.dp * target.micro_batch
    warnings = _warnings(model_args, proxy, target, law) + _check_global_batch(target, plan)
    point = run_point(args, target)
    batch_answer = (_batch_answer(point, shipped_prior(target.recipes), one_var, x_full)
                    if target.global_batch is None else None)
    start, end, batch_rules = scaling.scale_batch(
        proxy, c_full=c_full, seq_len=target.seq_len, multiple=multiple,
        global_batch=target.global_batch, proposed=(
            (batch_answer.tokens, batch_answer.rule, PRIOR_SOURCE) if batch_answer else None))
    mult = args.dim / model_args.mup_base_dim if model_args.mup_base_dim else 1.0
    ats, answers = zip(*(_lr_answer(point, float(n * target.seq_len), target, law=law,
                                    flops_per_token=c_full / target.tokens,
                                    law_batches=law_batches, offset=offset, width_mult=mult)
                         for n in (end, start)), strict=True)
    lr, hidden_lr, lr_rule = _lr(model_args, proxy.lr, c_proxy, args, c_full, target, ats[0],
                                 answers[0])
    warnings += _fitted_batch_warning(ats[0], lr) + _answer_warnings(answers[0], lr, target)
    if proxy.batch_schedule != "constant" and start == end:
        rule = next(r.rule for r in batch_rules if r.field == "batch_start")
        warnings.append(f"the tuned {proxy.batch_schedule!r} batch schedule collapsed to a "
                        f"constant batch of {end}: {rule.removeprefix('ramp collapsed: ')}.")
    gamma, gamma_rule = scaling.scale_gamma(proxy, lr)
    recipe = dataclasses.replace(proxy, lr=lr, batch_start=start, batch_end=end,
                                 batch_multiple=multiple, seq_len=target.seq_len,
                                 micro_batch=target.micro_batch, bias_update_speed=gamma,
                                 checkpoint_ratio=choice.checkpoint_ratio)
    recipe, tuned_warmup, informed = _warmup(recipe, proxy, proxy_tokens, target.tokens)
    steps = schedule_steps(recipe, target.tokens)
    rules = [lr_rule, *batch_rules, gamma_rule, scaling.warmup_rule(
        recipe, steps, tuned=tuned_warmup, informed=informed), *_fixed_rules(
        proxy, recipe, target, choice, steps)]
    warnings += _uninformed(model_args, args, proxy, tuned_warmup, informed)
    warnings += _outside_published(args, recipe, steps, c_full, hidden_lr)
    rules += _carried_rules(proxy, {r.field for r in rules})
    return FullRun(model_args=args, recipe=recipe, plan=plan, target=target, steps=steps,
                   hidden_lr=hidden_lr, rules=rules, warnings=warnings, lr_at=ats[0],
                   lr_at_start=ats[1] if start != end else None, answer=answers[0],
                   answer_at_start=answers[1] if start != end else None,
                   batch_answer=batch_answer,
                   cost=full_run_cost(args, recipe, plan, target, c_full),
                   proxy=(proxy_info or {}) | {"tokens": proxy_tokens, "compute": c_proxy,
                                               "recipe": proxy.to_dict()})


def _batch_answer(point: RunPoint, prior: Prior, law: StudyLaw | None,
                  x: float) -> BatchAnswer:
    """The final batch's anchored answer: the prior's, combined with the law's B*(x) if any."""
    batch_law = law.batch if law is not None else None
    if law is None or batch_law is None:
        return answer_batch(point, prior=prior)
    return answer_batch(point, prior=prior, law_batch=batch_law.at(x),
                        law_band=batch_law.band(x), law=f"the team's batch law ({law.name})",
                        decades_past=batch_law.decades_past(x))


def _lr_answer(point: RunPoint, batch: float, target: FullRunTarget, *, flops_per_token: float,
               law: StudyLaw | LrLaw | None, law_batches: LawBatches | None,
               offset: Offset | None, width_mult: float) -> tuple[LrAtBatch | None, LrAnswer]:
    """(the law read at ``batch``, the anchored answer there); ``flops_per_token``: the full
    run's M, a law in C = M·D reads; an applied offset places the prior where the reference
    stands (`tuner.modeling.anchor.offset`)."""
    at = None if law is None else lr_at_batch(
        law, tokens=point.tokens, batch=batch, flops_per_token=flops_per_token,
        batches=law_batches, params=point.n_active)
    family = offset.family if offset is not None and offset.applied else ""
    return at, answer_lr(dataclasses.replace(point, batch=batch),
                         prior=shipped_prior(target.recipes, family), law=at,
                         width_mult=width_mult, offset=offset)


def _lr(proxy_args: ModelArgs, proxy_lr: float, c_proxy: float, args: ModelArgs,
        c_full: float, target: FullRunTarget, at: LrAtBatch | None, answer: LrAnswer
        ) -> tuple[float, float, scaling.Rule]:
    """(lr, hidden-matrix lr, rule): the user's, else the anchored answer at the final batch
    (`tuner.modeling.anchor.answer`: the published recipes' prior, moved by the team's law where
    it reads one there), refused past `LAW_BAND_LIMIT` (`_answer_lr`)."""
    mup = bool(proxy_args.mup_base_dim)
    if target.lr is not None:
        lr, kind, text = target.lr, "user", f"--lr {target.lr:.4g}"
        text += f"; the anchored answer at this batch: {answer.lr:.4g} ({answer.width:.2f}x band)"
        if at is not None and at.lr is None:
            text += f"; the study's law refuses an LR at this batch ({at.refusal})"
        source = ""
    else:
        lr, kind, text, source = _answer_lr(at, answer, target), "scaled", answer.rule(), \
            "; ".join(filter(None, (PRIOR_SOURCE, scaling.LAW_SOURCE if at is not None else "")))
        if at is not None and lr == at.law_lr and at.lr is None:
            text = at.rule  # --lr-at-fitted-batch: the law's own LR, labelled as such
        elif mup:
            text += (f" The proxy's own base LR, {proxy_lr:.4g}, muP-transferred unchanged, is "
                     "one proxy point: it does not move the answer.")
    if not mup:
        return lr, lr, scaling.Rule(field="lr", value=lr, kind=kind, rule=text, source=source)
    width_mult = args.dim / proxy_args.mup_base_dim
    text += (f"; muP: the base LR (embeddings, head, norms); hidden matrices use lr / "
             f"width_mult = lr / ({args.dim}/{proxy_args.mup_base_dim}) = {lr / width_mult:.4g}")
    return lr, lr / width_mult, scaling.Rule(field="lr", value=lr, kind=kind, rule=text,
                                             source="; ".join(filter(None, (
                                                 source, scaling.MUP_SOURCE))))


# A law's 95% band at the full run wider than this (hi / lo) pins no LR: the export refuses to
# write the law's point there (the user gives --lr, or --lr-wide-band to write it labelled).
# 4x: twice the 2x within which the export calls an LR close to a published one, both ways.
LAW_BAND_LIMIT = 4.0


def _answer_lr(at: LrAtBatch | None, answer: LrAnswer, target: FullRunTarget) -> float:
    """The anchored answer's LR; with a law (``at``), refused (an `ExportError` naming what to
    pass) where its band is wider than `LAW_BAND_LIMIT`, unless the user accepts it
    (``lr_wide_band``); a plain study's export writes it with a warning. Where the
    team's law refuses its LR at this batch and the user asks for the law's LR at the batch it
    was fitted at (``lr_at_fitted_batch``), that LR, labelled."""
    if at is not None and at.lr is None and target.lr_at_fitted_batch \
            and at.valid_at_batch is not None:
        return at.law_lr
    lo, hi = answer.band
    # a plain study asked for no law's answer: it gets the prior's, its band said out loud
    if hi / lo > LAW_BAND_LIMIT and not target.lr_wide_band and at is not None:
        raise ExportError(
            f"lr: the anchored answer does not pin the full run's LR: its 95% band at the full "
            f"run's tokens and batch is [{lo:.3g}, {hi:.3g}], {hi / lo:.3g}x wide (more than "
            f"{LAW_BAND_LIMIT:g}x): {answer.rule()} Give the LR yourself with --lr, or "
            f"--lr-wide-band to write {answer.lr:.3g} anyway, labelled with its band.")
    return answer.lr


def _answer_warnings(answer: LrAnswer, lr: float, target: FullRunTarget) -> list[str]:
    """The answer's disagreement, and a wide band written on request, said out loud."""
    out = [answer.disagree] if answer.disagree else []
    if lr == answer.lr and answer.width > LAW_BAND_LIMIT:
        lo, hi = answer.band
        why = ("--lr-wide-band" if target.lr_wide_band else
               "the published recipes scatter more at this size and length than at theirs")
        out.append(f"BAND WIDER THAN {LAW_BAND_LIMIT:g}x ({why}): the anchored answer's band "
                   f"at the full run is [{lo:.3g}, {hi:.3g}], {answer.width:.3g}x wide: the "
                   "LR written is the prior's best estimate, not a pinned one.")
    return out


def _fitted_batch_warning(at: LrAtBatch | None, lr: float) -> list[str]:
    """The loud line when the LR written is a law's at a batch other than the final one."""
    if at is None or at.lr is not None or lr != at.law_lr or at.valid_at_batch is None:
        return []
    return [f"NOT MEASURED AT THIS BATCH: the LR written ({lr:.3g}) is the study's law at the "
            f"batch it was fitted at, {at.valid_at_batch:.4g} tokens per step (lr."
            f"valid_at_batch), not at the full run's {at.batch:.4g} "
            f"({at.decades_batch:.1f} decades away): how lr* moves with the batch was never "
            f"measured (--lr-at-fitted-batch). {at.refusal.split('. To export')[0]}."]


def _warmup(recipe: Recipe, proxy: Recipe, proxy_tokens: int,
            tokens: int) -> tuple[Recipe, int, bool]:
    """``recipe`` with the warmup of `scaling.warmup_steps` as its share of ``tokens`` (the
    tokens of those first steps of the full run's batch schedule), the proxy's tuned warmup
    steps, and whether the proxy informed it."""
    steps, tuned, informed = scaling.warmup_steps(proxy, proxy_tokens)
    seen = scaling.tokens_after_steps(recipe, tokens, steps)
    # half a token below the mark, so the step walk puts the end of warmup at exactly `steps`
    fraction = max(0.0, (seen - 0.5) / tokens) if steps else 0.0
    return dataclasses.replace(recipe, warmup_fraction=min(fraction, 0.5)), tuned, informed


def _uninformed(proxy_args: ModelArgs, args: ModelArgs, proxy: Recipe, tuned_warmup: int,
                informed: bool) -> list[str]:
    out = []
    if not informed:
        out.append(f"not informed by the proxy: its tuned warmup spans {tuned_warmup} steps, "
                   f"under 2/(1-beta2) = {math.ceil(2 / (1 - proxy.beta2))} Adam updates; the "
                   f"full run warms up the published {scaling.PUBLISHED_WARMUP_STEPS} steps.")
    router = {"score_func": (proxy_args.score_func, args.score_func),
              "gate_bias": (proxy_args.gate_bias, args.gate_bias)}
    differ = {k: v for k, v in router.items() if v[0] != v[1]}
    if differ:
        said = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in differ.items())
        out.append(f"not informed by the proxy: the target routes differently ({said}), so "
                   "the tuned gamma and alpha were tuned for another router.")
    return out


def _outside_published(args: ModelArgs, recipe: Recipe, steps: scaling.StepCounts,
                       c_full: float, hidden_lr: float) -> list[str]:
    """The full run's numbers outside published practice; like with like: a published single
    LR (standard parametrization, every parameter) against the LR the hidden matrices get,
    which under µP is lr / width_mult."""
    values: dict[str, float] = {"warmup_steps": steps.warmup,
                                "weight_decay": recipe.weight_decay}
    if args.gate_bias:
        values["bias_update_speed"] = recipe.bias_update_speed
    if recipe.balance_loss_alpha > 0:
        values["balance_loss_alpha"] = recipe.balance_loss_alpha
    if args.mtp_depth:
        values["mtp_lambda"] = recipe.mtp_lambda
    extra: list[tuple[references.Reference, float]] = [
        (references.batch_reference(scaling.b_opt_tokens(c_full)),
         float(recipe.batch_end * recipe.seq_len))]
    ref = references.lr_reference(scaling.eta_opt(c_full))
    if args.mup_base_dim:  # the base LR trains embeddings, head and norms only
        ref = dataclasses.replace(ref, name="LR of the hidden matrices (muP: lr / width_mult)")
    extra.append((ref, hidden_lr))
    return [f"outside published practice: {w}" for w in references.outside(values, extra)]


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
          source="tuner.modeling.cost_model.memory_per_gpu (modeled)"),
        R(field="precision", value=recipe.precision, kind="carried",
          rule="carried; fp8 maps to the blockwise recipe (1x128 activation tiles, 128x128 "
               "weight blocks, E4M3)" if recipe.precision == "fp8" else "carried",
          source="DeepSeek-V3 technical report, section 3.3" + (
              f"; fp8 speed: modeled from {fp8_speed.BLOCKWISE_H100.source}"
              if recipe.precision == "fp8" else "")),
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


def _warnings(model_args: ModelArgs, proxy: Recipe, t: FullRunTarget,
              law: StudyLaw | LrLaw | None = None) -> list[str]:
    out = []
    if t.tp is not None and t.tp > t.hardware.gpus_per_node:
        out.append(f"--tp {t.tp} spans more than one node ({t.hardware.gpus_per_node} GPUs per "
                   "node): tensor parallelism then runs over the inter-node network.")
    if t.global_batch is None and proxy.batch_schedule != "constant" and (
            law is None or not law.checks().batch_law):
        out.append("batch_end comes from the published recipes' prior, whose batches scatter "
                   "far more than their LRs (the batch_end rule gives its band); no batch law "
                   "of the study's moved it.")
    return out


def full_run_cost(args: ModelArgs, recipe: Recipe, plan: cm.ParallelPlan, t: FullRunTarget,
                  c_full: float) -> dict[str, Any]:
    """Modeled size, memory and time of the full run (label: modeled)."""
    params = cm.count_params(args)
    mem = cm.memory_per_gpu(args, plan, seq_len=t.seq_len, micro_batch=t.micro_batch,
                            precision=recipe.precision,
                            checkpoint_ratio=recipe.checkpoint_ratio)
    f = cm.flops_per_token(args, t.seq_len, checkpoint_ratio=recipe.checkpoint_ratio)
    shape = {"seq_len": t.seq_len, "micro_batch": t.micro_batch, "ep": plan.ep, "tp": plan.tp}
    hours = cm.gpu_hours(args, tokens=t.tokens, hw=t.hardware, precision=recipe.precision,
                         mfu=t.mfu, checkpoint_ratio=recipe.checkpoint_ratio, **shape)
    fp8 = cm.run_fp8_speed(args, t.hardware, recipe.precision, **shape)
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
            args, global_batch=recipe.batch_end, gpus=t.gpus, hw=t.hardware,
            precision=recipe.precision, mfu=t.mfu, checkpoint_ratio=recipe.checkpoint_ratio,
            **shape),
        "mfu": t.mfu, "mfu_source": MFU_SOURCE if t.mfu == DEFAULT_MFU else "--mfu",
        "precision_speed": (fp8.to_dict() if fp8 is not None else
                            {"label": "modeled", "source": f"{recipe.precision} at the "
                             f"{'TF32' if recipe.precision == 'fp32' else 'bf16'} peak"}),
        "not_modeled": "communication, pipeline bubbles, allocator fragmentation",
    }


# -- the modeled full-run cost of a proxy recipe (the core's full_* metrics) ------------------

@functools.lru_cache(maxsize=256)
def modeled_cost(recipe: Recipe, proxy_args: ModelArgs, target: FullRunTarget,
                 token_budget: int) -> tuple[float, float]:
    """(per-GPU peak GiB, GPU-hours) of the full run ``recipe`` scales to; (inf, inf) when no
    layout fits. The checkpoint ratio is re-chosen for the full run, so the peak moves with what
    the recipe carries over (precision) and what the memory model must recompute to fit."""
    try:
        # the LR does not enter the cost: a wide band is no reason to call a recipe unbuildable
        full = build_full_run(recipe, proxy_args, dataclasses.replace(target, lr_wide_band=True),
                              proxy_tokens=token_budget)
    except ExportError:
        return math.inf, math.inf
    return float(full.cost["peak_memory_gib"]["total"]), float(full.cost["gpu_hours"])


@functools.lru_cache(maxsize=16)
def target_of(model: str, hardware: str, gpus: int, tokens: int, seq_len: int) -> FullRunTarget:
    """The `FullRunTarget` of a study's ``[full_run]`` section (``model``: config JSON or preset).

    Raises:
        ValueError: an unknown hardware or preset, or a config ModelArgs refuses.
    """
    args, name = load_target(model)
    return FullRunTarget(model_args=args, name=name, hardware=get_hardware(hardware), gpus=gpus,
                         tokens=tokens, seq_len=seq_len)
