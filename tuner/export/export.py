"""Export a study's chosen trial as a full-run recipe: pick it, scale it, say what to check.

Besides the warnings of `build_full_run` (numbers the proxy could not inform, numbers outside
published practice), the export warns when a searched parameter of the chosen trial sits in the
outer edge of its search range (`tuner.study.results.diagnostics`; a log range measured in log
space), with how many finished trials sit there too: the optimum may lie beyond the range.
Parameters the study did not search are named once, since their values were fixed, not tuned. In a
study with a timed objective, a systems knob the export carries (the precision) was chosen by the
proxy's speed on the study's device: the export says so, with the knob's modeled cost on the target
(`tuner.export.device`).

    >>> full, picked = export_study(study, Pick(kind="knee"), target)  # doctest: +SKIP
    >>> print(tuner.export.formats.render("megatron", full))          # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from tuner.export.backtest import backtest
from tuner.export.device import timed_choice_warnings
from tuner.export.pick import Pick, Picked, finished_trials, pick_trial
from tuner.modeling import scaling
from tuner.modeling.anchor.offset import Offset
from tuner.modeling.full_run import FullRun, FullRunTarget, build_full_run
from tuner.modeling.laws.interface import LrLaw
from tuner.modeling.laws.lr_at_batch import LawBatches
from tuner.modeling.laws.pooled_law import LACK_OF_FIT_P
from tuner.modeling.laws.power_law import StudyLaw, deepseek_llm_batch, deepseek_llm_lr
from tuner.modeling.published_recipes import published_recipe
from tuner.modeling.vocab_share import vocab_notes
from tuner.study.results import diagnostics
from tuner.study.store import records


def export_study(study: Any, pick: Pick, target: FullRunTarget, *,
                 law: StudyLaw | LrLaw | None = None,
                 law_batches: LawBatches | None = None,
                 offset: Offset | None = None) -> tuple[FullRun, Picked]:
    """Pick a trial of an Optuna ``study`` and scale it to ``target``; with a law study's
    ``law``, the final batch from its batch law and the LR its law gives at that batch
    (`tuner.modeling.laws.lr_at_batch`: a law in D alone fitted at one batch refuses it elsewhere).
    ``law_batches``: the batches a law in D alone was fitted at, by default those of
    ``study``'s own finished trials (a law study's budgets share one search space);
    ``offset``: the study's configuration against a reference one, measured side by side
    (`tuner.modeling.anchor.offset`, ``moetune export --reference``)."""
    picked = pick_trial(study, pick)
    if isinstance(law, StudyLaw) and law_batches is None:
        law_batches = LawBatches.of(float(t.recipe.batch_end * t.recipe.seq_len)
                                    for t in finished_trials(study) if not t.warm_start)
    info = {"study": study.study_name, "pick": pick.kind, "how": picked.how,
            "validation": study.user_attrs.get(records.VALIDATION)}
    r = picked.record
    info |= {"trial": r.number, "values": r.values}
    full = build_full_run(r.recipe, r.model_args, target, proxy_tokens=r.token_budget,
                          proxy_info=info, law=law, law_batches=law_batches, offset=offset)
    if not r.feasible:
        full.warnings.insert(0, f"trial {r.number} violates a study constraint.")

    full.warnings.extend(vocab_notes(r.model_args, full.model_args, r.recipe.seq_len))
    check = info["validation"]
    if check and not check.get("chosen_stays_on_top", True):
        full.warnings.append(f"transfer check (moetune validate, {check.get('scale')}x width): "
                             f"trial {check.get('chosen_trial')} did not stay on top; Spearman "
                             f"{check.get('spearman')}.")
    full.warnings.extend(edge_warnings(study, picked) + unsearched_warnings(picked)
                         + timed_choice_warnings(study, picked, full, target))
    full.warnings.extend(law_warnings(full, law, target))
    if law is not None:
        full.backtest.extend(backtest(law, proxy=r.model_args, batches=law_batches))
    return full, picked


def law_warnings(full: FullRun, law: StudyLaw | LrLaw | None,
                 target: FullRunTarget) -> list[str]:
    """The law's checks (`tuner.modeling.laws.interface.LawChecks`: a study's held-out budget
    and lack of fit; a law fitted from a table of runs has neither), and the LR and batch
    against DeepSeek LLM's law and the target's published recipe, like with like (a published
    single LR against the LR the target's hidden matrices get: lr / width_mult under µP),
    warned past 2x apart."""
    c_full = scaling.compute_budget(full.model_args, target.seq_len, target.tokens)
    if law is None:
        return _against_published(full, False, c_full, target)
    out = []
    checks = law.checks()
    p = checks.lack_of_fit_p
    if p is not None and p < LACK_OF_FIT_P:
        out.append(f"the study's budgets' lr optima do not lie on one power law (lack of fit "
                   f"p = {p:.2g}, law.md): the law's band assumes they do, so its weight in "
                   "the anchored answer is larger than it should be.")
    if checks.origin == "study" and not checks.held_out:
        out.append("the study's law has not been checked on a held-out budget ([law] held_out, "
                   "then `moetune resume`).")
    elif checks.held_out:
        out += missed_check_warnings(dict(checks.held_out))
    return out + _against_published(full, checks.batch_law, c_full, target)


def compared_lr(full: FullRun) -> tuple[float, str]:
    """The LR comparable with a published single LR, and what it is: the LR nearly every
    parameter gets (under µP the hidden matrices' lr / width_mult, not the base LR)."""
    if full.model_args.mup_base_dim:
        return full.hidden_lr, (f"LR of its hidden matrices (muP: lr {full.recipe.lr:.3g} / "
                                f"width_mult {full.recipe.lr / full.hidden_lr:.4g})")
    return full.recipe.lr, "lr"


def _against_published(full: FullRun, batch_law: bool, c_full: float,
                       target: FullRunTarget) -> list[str]:
    out = []
    lr, what = compared_lr(full)
    batch = float(full.recipe.batch_end * full.recipe.seq_len)
    refs = [("DeepSeek LLM's law", deepseek_llm_lr(c_full), deepseek_llm_batch(c_full))]
    pub = published_recipe(target.name) or published_recipe(f"deepseek-v3-{target.name}")
    if pub is not None:
        refs.append((f"{pub.name}'s published recipe", pub.lr, pub.batch_tokens))
    for name, ref_lr, ref_batch in refs:
        if max(lr / ref_lr, ref_lr / lr) > 2:
            out.append(f"the full run's {what}, {lr:.3g}, is {lr / ref_lr:.2g}x {name} "
                       f"({ref_lr:.3g}, one LR for every parameter).")
        if batch_law and max(batch / ref_batch, ref_batch / batch) > 2:
            out.append(f"the study's law gives a final batch of {batch:.4g} tokens, "
                       f"{batch / ref_batch:.2g}x {name} ({ref_batch:.4g}).")
    return out


def missed_check_warnings(held: dict[str, Any]) -> list[str]:
    """A warning for each law whose held-out prediction (made before that budget ran) missed
    the budget's own optimum, outside the prediction's band."""
    out = []
    for key, what, fmt in (("lr", "lr", ".3g"), ("batch", "final batch (tokens)", ".4g")):
        if held.get(f"{key}_inside", True):
            continue
        lo, hi = held[f"{key}_band"]
        out.append(f"the study's law missed its own held-out check: before the "
                   f"{held['tokens']}-token budget ran it predicted {what} "
                   f"{held[f'{key}_predicted']:{fmt}} (band [{lo:{fmt}}, {hi:{fmt}}]), and that "
                   f"budget's own search found {held[f'{key}_measured']:{fmt}} "
                   f"({held[f'{key}_ratio']:.2f}x): the optimum does not follow one power law "
                   "that far, or the band understates its uncertainty, so the full run's band is "
                   "too narrow (law.md; the law now includes that budget).")
    return out


TUNED = ("lr", "warmup_fraction", "batch_schedule", "bias_update_speed", "balance_loss_alpha",
         "mtp_lambda", "weight_decay")  # the recipe fields the export scales or checks


def edge_warnings(study: Any, picked: Picked) -> list[str]:
    """`tuner.study.results.diagnostics.edge_warnings` for the picked trial."""
    own = [r for r in finished_trials(study) if not r.warm_start]  # not another study's
    return diagnostics.edge_warnings(study.trials, picked.record.number, own)


def unsearched_warnings(picked: Picked) -> list[str]:
    fixed = [f for f in TUNED if f not in picked.record.params]
    if not fixed:
        return []
    return [f"not informed by the proxy: the study did not search {', '.join(fixed)}; their "
            "values were fixed in the spec and are carried or scaled from there."]
