"""Named baselines: a published recipe mapped down to a proxy by the inverse of the export's rules.

`tuner.modeling.full_run.build_full_run` scales a tuned proxy recipe up to a full run; a baseline
runs the other way, so that exporting the baseline's proxy recipe to the published run gives the
published recipe back (up to what that run's layout rounds):

- LR: without µP, the export's compute law lr_full = lr_proxy · (C_full/C_proxy)^−0.125 solved
  for lr_proxy; with µP (proxy ``mup_base_dim > 0``) the export keeps the base LR and trains
  hidden matrices at lr / width_mult, so the published LR is the hidden one and the proxy's base
  LR is published · width_mult.
- γ (bias update speed): the export keeps γ/lr, so γ_proxy = γ_published · lr_proxy / lr_full,
  with lr_full the LR the export gives lr_proxy.
- Batch: the export keeps the ramp's shape (start/end, ramp length as a share of tokens) and
  takes the final batch from DeepSeek LLM's B_opt(C); the proxy's final batch is the same
  multiple of B_opt at the proxy's C as the published batch is of B_opt at the full run's C.
- Warmup: the same share of the run's tokens as the published warmup steps take of the
  published run (the tokens of its first ``warmup_steps`` steps under its batch ramp).
- LR schedule: warmup, a stable peak, then a decay to ``final_lr``: a ``wsd`` Recipe whose
  decay starts at the same share of tokens, ending at final_lr / peak_lr.
- Carried unchanged, as the export carries them: betas, weight decay, clipping, α, MTP λ,
  precision.

The proxy's own ``seq_len``, ``micro_batch`` and ``checkpoint_ratio`` are not the published
run's (the export sets those for the full run), so a baseline leaves them to the study.
"""

from __future__ import annotations

import dataclasses

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from tuner.modeling import scaling
from tuner.modeling.references import DEEPSEEK_V3, PublishedRecipe
from tuner.modeling.targets import published_target

BASELINES: dict[str, PublishedRecipe] = {DEEPSEEK_V3.name: DEEPSEEK_V3}


def published_full_recipe(p: PublishedRecipe) -> Recipe:
    """The published run's recipe as a `Recipe` at its own scale (warmup as its share of the
    tokens of the first ``warmup_steps`` steps)."""
    r = Recipe(batch_schedule="linear", batch_start=p.batch_start, batch_end=p.batch_end,
               batch_ramp_fraction=p.batch_ramp_tokens / p.tokens, seq_len=p.seq_len,
               lr=p.peak_lr, warmup_fraction=0.0, decay="wsd",
               decay_fraction=(p.tokens - p.stable_until_tokens) / p.tokens,
               min_lr_ratio=p.final_lr / p.peak_lr, beta1=p.beta1, beta2=p.beta2,
               weight_decay=p.weight_decay, grad_clip=p.grad_clip,
               bias_update_speed=p.bias_update_speed, balance_loss_alpha=p.balance_loss_alpha,
               mtp_lambda=p.mtp_lambda, precision=p.precision)  # type: ignore[arg-type]
    warmup_tokens = scaling.tokens_after_steps(r, p.tokens, p.warmup_steps)
    return dataclasses.replace(r, warmup_fraction=warmup_tokens / p.tokens)


def categorical_values(p: PublishedRecipe) -> dict[str, str]:
    """The baseline's categorical fields: they do not depend on the proxy, so a spec can be
    checked against them before any model is built."""
    r = published_full_recipe(p)
    return {"batch_schedule": r.batch_schedule, "decay": r.decay, "precision": r.precision}


def proxy_baseline(p: PublishedRecipe, proxy_args: ModelArgs, *, proxy_tokens: int,
                   seq_len: int) -> list[scaling.Rule]:
    """``p`` mapped to a proxy of ``proxy_args`` training ``proxy_tokens`` tokens of ``seq_len``:
    one `scaling.Rule` per Recipe field it sets (module docstring), each saying how.

    Raises:
        ValueError: ``proxy_tokens`` or ``seq_len`` not positive.
    """
    if proxy_tokens <= 0 or seq_len <= 0:
        raise ValueError(f"proxy_baseline: proxy_tokens and seq_len must be > 0, but got "
                         f"proxy_tokens={proxy_tokens}, seq_len={seq_len}.")
    full = published_full_recipe(p)
    target, _ = published_target(p.target)
    c_proxy = scaling.compute_budget(proxy_args, seq_len, proxy_tokens)
    c_full = scaling.compute_budget(target, p.seq_len, p.tokens)
    R = scaling.Rule
    if proxy_args.mup_base_dim:
        width_mult = target.dim / proxy_args.mup_base_dim
        lr, lr_full = p.peak_lr * width_mult, p.peak_lr * width_mult
        lr_rule = R(field="lr", value=lr, kind="scaled", source=scaling.MUP_SOURCE,
                    rule=(f"inverse of the export's muP rule (hidden matrices at lr / "
                          f"width_mult): the published {p.peak_lr:.3g} is the hidden LR, so the "
                          f"base LR is {p.peak_lr:.3g} * {target.dim}/"
                          f"{proxy_args.mup_base_dim} = {lr:.4g}"))
    else:
        lr, lr_full = p.peak_lr * (c_full / c_proxy) ** -scaling.LR_EXPONENT, p.peak_lr
        lr_rule = R(field="lr", value=lr, kind="scaled", source=scaling.COMPUTE_LAW_SOURCE,
                    rule=(f"moved to the proxy by DeepSeek LLM's compute law: lr_full * "
                          f"(C_full/C_proxy)^0.125 = {p.peak_lr:.3g} * ({c_full:.4g}/"
                          f"{c_proxy:.4g})^0.125 = {lr:.4g} (a start point for the search; the "
                          "export's LR is the anchored answer at the full run, not this "
                          "rule run forwards)"))
    gamma = p.bias_update_speed * lr / lr_full
    fit_multiple = p.batch_end * p.seq_len / scaling.b_opt_tokens(c_full)
    end = max(1, round(fit_multiple * scaling.b_opt_tokens(c_proxy) / seq_len))
    start = max(1, round(end * p.batch_start / p.batch_end))
    carried = "carried unchanged, as the export carries it"
    return [
        lr_rule,
        R(field="bias_update_speed", value=gamma, kind="scaled", source=scaling.GAMMA_SOURCE,
          rule=(f"inverse of the export's gamma rule (gamma/lr kept): {p.bias_update_speed:g} "
                f"* {lr:.4g}/{lr_full:.4g} = {gamma:.4g}")),
        R(field="batch_schedule", value="linear", kind="carried",
          rule=f"the batch ramps from {p.batch_start} to {p.batch_end} sequences"),
        R(field="batch_end", value=end, kind="scaled", source=scaling.COMPUTE_LAW_SOURCE,
          rule=(f"{p.name} used {fit_multiple:.3g} x DeepSeek LLM's B_opt(C_full), so the "
                f"proxy gets {fit_multiple:.3g} x "
                f"B_opt(C_proxy) = {fit_multiple * scaling.b_opt_tokens(c_proxy):.4g} tokens "
                f"= {end} sequences of {seq_len}")),
        R(field="batch_start", value=start, kind="scaled",
          rule=(f"ramp shape kept, as the export keeps it: start/end = {p.batch_start}/"
                f"{p.batch_end} of {end} = {start}")),
        R(field="batch_ramp_fraction", value=full.batch_ramp_fraction, kind="carried",
          rule=(f"the ramp's share of the tokens: {p.batch_ramp_tokens:.4g}/{p.tokens:.4g} = "
                f"{full.batch_ramp_fraction:.4g}")),
        R(field="warmup_fraction", value=full.warmup_fraction, kind="carried",
          source=scaling.WARMUP_SOURCE,
          rule=(f"the share of the published run's tokens its {p.warmup_steps} warmup steps "
                f"take: {full.warmup_fraction:.4g}")),
        R(field="decay", value="wsd", kind="carried",
          rule=(f"the LR stays at its peak until {p.stable_until_tokens:.4g} of "
                f"{p.tokens:.4g} tokens, then decays: warmup-stable-decay")),
        R(field="decay_fraction", value=full.decay_fraction, kind="carried",
          rule=(f"the decay's share of the tokens: 1 - {p.stable_until_tokens:.4g}/"
                f"{p.tokens:.4g} = {full.decay_fraction:.4g}")),
        R(field="min_lr_ratio", value=full.min_lr_ratio, kind="carried",
          rule=f"the decay ends at {p.final_lr:.3g}/{p.peak_lr:.3g} = {full.min_lr_ratio:.4g}"),
        *[R(field=name, value=getattr(full, name), kind="carried", rule=carried)
          for name in ("beta1", "beta2", "weight_decay", "grad_clip", "balance_loss_alpha",
                       "mtp_lambda", "precision")],
    ]
