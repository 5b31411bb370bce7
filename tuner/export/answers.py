"""Which study answers an export, and with what: a law study exports its laws (`law_answer`), a
ladder its top rung (`ladder_answer`). The command line's ``moetune export`` and the service's
export both ask these (`tuner.app.actions.export`), so the two cannot answer differently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.study.specs.ladder_spec import rung_name
from tuner.study.specs.law_spec import base_name
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.workflows.law_fit import budget_studies, fit_law


def law_answer(study: Any, run_dir: Path, storage: str) -> tuple[Any, Any, str]:
    """A law study (any of its budgets) exports its laws: the LR and final batch from the
    study's own fit at the full run, the other knobs from the pick at its largest budget (the
    held-out one once it exists), from the same storage."""

    if not (study.user_attrs.get(records.SPEC) or {}).get("law"):
        return study, None, ""  # not a law study
    spec = st.stored_spec(study)
    store = db.open_existing_storage(db.storage_url(run_dir, storage, spec.study.storage))
    base = st.stored_spec(st.load_study(base_name(spec.name, spec.law), store))
    studies = budget_studies(base, store)
    fit = fit_law(base, studies)
    law = fit.study_law()
    if law is None:
        raise LookupError(f"law {base.name!r} has no lr law yet (it needs 2 budgets with an "
                          f"optimum): `moetune resume {base.name}` goes on.")
    largest = studies[-1][1]
    held = fit.held_out_check()
    said = (f"law {base.name}: LR and final batch from the study's own laws over "
            f"{len(fit.fitted)} budgets"
            + (" (the held-out one included, after its check)" if fit.held_out_in_law else "")
            + f"; other knobs from {largest.study_name}"
            + (f"; held-out check: predicted/measured lr {held['lr_ratio']:.2f}"
               if held else "; no held-out check yet")
            + (f"; no batch law (every budget's batch optimum at the smallest batch searched, "
               f"<= {fit.batch_below_range:.0f} tokens): the final batch is DeepSeek LLM's "
               "B_opt" if fit.batch_below_range else ""))
    return largest, law, said


def ladder_answer(study: Any, run_dir: Path, storage: str) -> tuple[Any, str]:
    """A ladder's answer is its top rung: exporting the ladder (its bottom study) exports the
    top rung's trial, from the same storage; a rung says the width it was measured at."""

    if not (study.user_attrs.get(records.SPEC) or {}).get("ladder"):
        return study, ""  # not a ladder (a study without a stored spec is none either)
    spec = st.stored_spec(study)
    lad = spec.ladder
    if lad.rung == 0:
        top = rung_name(spec.name, lad.widths, len(lad.widths) - 1)
        store = db.open_existing_storage(db.storage_url(run_dir, storage, spec.study.storage))
        if top not in db.study_names(store):
            raise LookupError(f"ladder {spec.name!r} has not reached its top rung ({top}, width "
                              f"{lad.widths[-1]}) yet: `moetune resume {spec.name}` goes on, "
                              f"or export a rung by its name.")
        return (st.load_study(top, store),
                f"ladder {spec.name}: the answer is its top rung {top}, measured at width "
                f"{lad.widths[-1]} (rungs {list(lad.widths)})")
    return study, (f"{spec.name} is rung {lad.rung} of ladder {spec.name.rsplit('.w', 1)[0]}: "
                   f"measured at width {lad.width} (rungs {list(lad.widths)})")
