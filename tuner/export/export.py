"""Export a study's chosen trial as a full-run recipe: pick it, scale it, say what to check.

    >>> full, picked = export_study(study, Pick(kind="knee"), target)  # doctest: +SKIP
    >>> print(tuner.export.formats.render("megatron", full))          # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from tuner.export.pick import Pick, Picked, pick_trial
from tuner.modeling.full_run import FullRun, FullRunTarget, build_full_run
from tuner.study import records


def export_study(study: Any, pick: Pick, target: FullRunTarget) -> tuple[FullRun, Picked]:
    """Pick a trial of an Optuna ``study`` and scale it to ``target``."""
    picked = pick_trial(study, pick)
    info = {"study": study.study_name, "pick": pick.kind, "how": picked.how,
            "validation": study.user_attrs.get(records.VALIDATION)}
    r = picked.record
    info |= {"trial": r.number, "values": r.values}
    full = build_full_run(r.recipe, r.model_args, target, proxy_tokens=r.token_budget,
                          proxy_info=info)
    if not r.feasible:
        full.warnings.insert(0, f"trial {r.number} violates a study constraint.")
    check = info["validation"]
    if check and not check.get("chosen_stays_on_top", True):
        full.warnings.append(f"transfer check (moetune validate, {check.get('scale')}x width): "
                             f"trial {check.get('chosen_trial')} did not stay on top; Spearman "
                             f"{check.get('spearman')}.")
    return full, picked
