"""Which study answers an export, and with what: a law study exports its laws (`law_answer`), a
ladder its top rung (`ladder_answer`). The command line's ``moetune export`` and the service's
export both ask these (`tuner.app.requests.actions.export`), so the two cannot answer differently.
On the command line a law fitted from a table of runs (``moetune law fit``'s law.json, `table_law`)
can give the LR instead (``--law``); the service reads no file a request names.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.export.export import export_study
from tuner.export.pick import Pick, finished_trials
from tuner.modeling.anchor.offset import Offset, OffsetError, measure_offset
from tuner.modeling.full_run import FullRun, FullRunTarget, load_target
from tuner.modeling.hardware import get_hardware
from tuner.modeling.laws.forms import UnknownFormError, read_lr_law
from tuner.modeling.laws.interface import LawChecks, LrForm
from tuner.study.specs.ladder_spec import rung_name
from tuner.study.specs.law_spec import base_name
from tuner.study.specs.spec import StudySpec
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.workflows.law_fit import LawFit, budget_studies, fit_law, law_cells


def law_answer(study: Any, run_dir: Path, storage: str) -> tuple[Any, Any, str]:
    """A law study (any of its budgets) exports its laws: the LR and final batch from the
    study's own fit at the full run, the other knobs from the pick at its largest budget (the
    held-out one once it exists; never the held-out batch), from the same storage."""

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
    largest = largest_budget(base, studies)
    held = fit.held_out_check()
    said = (f"law {base.name}: LR and final batch from the study's own laws over "
            f"{len(fit.fitted)} budgets"
            + (" (the held-out one included, after its check)" if fit.held_out_in_law else "")
            + f"; other knobs from {largest.study_name}"
            + (f"; held-out check: predicted/measured lr {held['lr_ratio']:.2f}"
               + (f" at {held['at_batch']:.0f} tokens per step, the one batch it searched"
                  if "at_batch" in held else "")
               if held else "; no held-out check yet")
            + (f"; no batch law (every budget's batch optimum at the smallest batch searched, "
               f"<= {fit.batch_below_range:.0f} tokens): the final batch is DeepSeek LLM's "
               "B_opt" if fit.batch_below_range else ""))
    return largest, law, said


def largest_budget(base: StudySpec, studies: list[tuple[int, Any]]) -> Any:
    """The study a law's export takes its other knobs from: its largest budget. The held-out
    batch (last when there is one) is a check at one batch the grid did not fit, often at a
    smaller budget, so never it."""
    hob = base.law.held_out_batch_index
    return [s for i, s in studies if i != hob][-1]


def law_full_run(base: StudySpec, studies: list[tuple[int, Any]], fit: LawFit) -> FullRun | None:
    """What ``moetune export LAW`` writes for the law's own ``[full_run]`` (its target, GPUs,
    hardware, tokens; the default pick): the one answer law.md, the terminal line and the
    service's law page read, so none of them can say another LR than the export. None without
    a target or an lr law yet.

    Raises:
        ExportError: the export itself fails (no layout fits the [full_run] GPUs, ...).
        ValueError: the target's config cannot be read.
    """
    law = fit.study_law()
    if not base.full_run_target or law is None or not studies:
        return None
    f = base.full_run
    args, name = load_target(base.full_run_target)
    target = FullRunTarget(model_args=args, name=name, hardware=get_hardware(f.hardware),
                           gpus=f.gpus, tokens=f.tokens, seq_len=f.seq_len, lr_wide_band=True)
    full, _ = export_study(largest_budget(base, studies), Pick(kind="knee"), target, law=law)
    return full


def table_law(path: Path, study: Any) -> tuple[TableLaw, str]:
    """The law in tokens and batch of a law.json written by ``moetune law fit``, to give the LR
    of an export of ``study`` at the batch it writes (``--law``).

    Such a law is fitted on runs in standard parametrization (one LR for every parameter), so
    it is refused for a study whose trials trained under µP, whose LR is the base LR of
    embeddings, head and norms: the two would not mean the same LR.

    Raises:
        LookupError: the file cannot be read.
        ValueError: it holds no law in tokens and batch, or ``study`` trained under µP.
    """
    where = f"--law {str(path)!r}"
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise LookupError(f"--law: cannot read {where}: {e.strerror or e}.") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"--law: must be a law.json written by `moetune law fit`, but "
                         f"{where} is not JSON ({e}).") from None
    entry = data.get("lr_batch_law") if isinstance(data, dict) else None
    if not isinstance(entry, dict):
        raise ValueError(f"--law: must hold a law in tokens and batch (key 'lr_batch_law', "
                         f"written by `moetune law fit`), but {where} has none.")
    try:
        law = read_lr_law(entry)
    except UnknownFormError as e:
        raise ValueError(f"--law: lr_batch_law.{e} (in {where}).") from None
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ValueError(f"--law: its 'lr_batch_law' must be as `moetune law fit` writes it, "
                         f"but {where} lacks or mangles {e}.") from None
    if any(t.model_args.mup_base_dim for t in finished_trials(study)):
        raise ValueError(f"--law: a law fitted from a table of runs gives one LR for every "
                         f"parameter (standard parametrization), but study "
                         f"{study.study_name!r} trained under muP, where the LR is the base "
                         f"LR: export a study trained without muP, or give --lr.")
    named = TableLaw(law=law, name=f"fitted from a table of runs, {path.name}, "
                                   f"{law.n_cells} cells")
    return named, (f"LR from the published recipes' prior moved by the law fitted from a table "
                   f"of runs ({path}, {law.n_cells} cells), read at the final batch written")


@dataclass(frozen=True)
class TableLaw:
    """A law of ``moetune law fit``, of any registered form, under the name the export gives
    it: a table's law, not the study's (it has no held-out budget;
    `tuner.export.export.law_warnings` says so)."""

    law: LrForm
    name: str

    def at(self, tokens: float, batch: float, params: float | None = None) -> float:
        return self.law.at(tokens, batch, params)

    def band(self, tokens: float, batch: float, params: float | None = None,
             level: float = 0.95) -> tuple[float, float]:
        return self.law.band(tokens, batch, params, level)

    def decades_past(self, tokens: float, batch: float) -> Mapping[str, float]:
        return self.law.decades_past(tokens, batch)

    def interaction(self, tokens: float, batch: float) -> dict[str, Any] | None:
        return self.law.interaction(tokens, batch)

    @property
    def params_range(self) -> tuple[float, float] | None:
        return self.law.params_range

    def checks(self) -> LawChecks:
        return dataclasses.replace(self.law.checks(), origin="table")


def reference_offset(study: Any, reference: str, run_dir: Path, storage: str) -> Offset:
    """The offset of law study ``study`` against the law study ``reference`` in the same
    storage (`tuner.modeling.anchor.offset`): each budget's (budget, batch) cells of the one
    against the other's, checked on the largest budget both searched.

    Raises:
        LookupError: ``reference`` is not a study there.
        ValueError: either is not a law study, or they share too few cells (said).
    """
    cells = []
    for which, s in (("study", study), ("reference", None)):
        if s is None:
            spec = st.stored_spec(study)
            store = db.open_existing_storage(db.storage_url(run_dir, storage,
                                                            spec.study.storage))
            s = st.find_study(reference, store)
            if s is None:
                raise LookupError(f"--reference: no study {reference!r} in the study's "
                                  "storage (a law study of the reference configuration, run "
                                  "beside this one: docs/full_run.md).")
        if not (s.user_attrs.get(records.SPEC) or {}).get("law"):
            raise ValueError(f"--reference: the {which} must be a law study (its cells are "
                             f"what is compared), but {s.study_name!r} is not one.")
        spec = st.stored_spec(s)
        store = db.open_existing_storage(db.storage_url(run_dir, storage, spec.study.storage))
        base = st.stored_spec(st.load_study(base_name(spec.name, spec.law), store))
        fit = fit_law(base, budget_studies(base, store))
        cells.append(law_cells(fit.budgets))
    try:
        return measure_offset(cells[0], cells[1])
    except OffsetError as e:
        raise ValueError(f"--reference: {e}") from None


def ladder_answer(study: Any, run_dir: Path, storage: str) -> tuple[Any, str]:
    """A ladder's answer is its top rung: exporting the ladder (its bottom study) exports the
    top rung's trial, from the same storage; a rung says the width it was measured at."""

    if not (study.user_attrs.get(records.SPEC) or {}).get("ladder"):
        return study, ""  # not a ladder (a study without a stored spec is none either)
    spec = st.stored_spec(study)
    lad = spec.ladder
    if spec.kind == "ladder":
        top = rung_name(spec.name, lad.widths, len(lad.widths) - 1)
        store = db.open_existing_storage(db.storage_url(run_dir, storage, spec.study.storage))
        found = st.find_study(top, store)
        if found is None:
            raise LookupError(f"ladder {spec.name!r} has not reached its top rung ({top}, width "
                              f"{lad.widths[-1]}) yet: `moetune resume {spec.name}` goes on, "
                              f"or export a rung by its name.")
        return (found,
                f"ladder {spec.name}: the answer is its top rung {top}, measured at width "
                f"{lad.widths[-1]} (rungs {list(lad.widths)})")
    return study, (f"{spec.name} is rung {lad.rung} of ladder {spec.name.rsplit('.w', 1)[0]}: "
                   f"measured at width {lad.width} (rungs {list(lad.widths)})")
