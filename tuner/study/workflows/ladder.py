"""A study that climbs proxy widths: scale as the fidelity of the search (``[ladder]``).

Many candidates train at the bottom width; the best share (``promote``) climbs to the next
width, and so on; the top rung's result is the study's answer. Each rung is an ordinary study
in the ladder's one storage (so reports, export, rerun, compare and the service read it as they
read any study): the bottom rung is the study ``[study] name``, rung i > 0 is
``<name>.w<width>`` (`ladder_spec.rung_name`).

How the sampler learns from every rung: Optuna's samplers take no fidelity input, so each rung
above the bottom is a study warm-started (`tuner.study.run.warm_start`) from the rung below —
its sampler sees every trial of that rung, which itself saw the one below — with the promoted
candidates enqueued first (`[start] enqueue`, each linked to its trial below by the rung's
``ladder.promoted``) and then ``proposals`` trials the warm-started sampler proposes.

Promotion: the feasible trials of the rung (its own, not the warm-start copies) ranked by
val_loss for one objective, by non-dominated rank for several; the best ``ceil(promote · n)``
(at least 1) climb, and every trial tied with the last of them within the measured noise
(one objective: `tuner.study.results.noise.tied`) or in the same non-dominated rank (several)
climbs with it, so a cut never separates recipes the data cannot order.

µP (`trainers.nn.mup`, on by default) is based at the bottom width, so a learning rate means the
same on every rung. ``top_noise = false`` skips the noise re-runs on the top rung, which decide
no promotion (measured: benchmarks/RESULTS.md, "A ladder of widths, 32 → 256").
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

import optuna

from tuner.study.results.noise import noise_sd, objective_noise, tied
from tuner.study.results.ranking import minimised, nondominated_ranks
from tuner.study.results.trial_record import TrialRecord, study_objectives, trial_records
from tuner.study.specs.ladder_spec import rung_name
from tuner.study.specs.spec import StudySpec
from tuner.study.specs.start_spec import StartSection
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.workflows.stage import Stage, Stages, check_owned

Promoted = list[tuple[int, dict[str, Any]]]  # (trial number in the rung below, its params)


def rung_spec(ladder: StudySpec, rung: int, promoted: Promoted) -> StudySpec:
    """The spec of rung ``rung`` of the ladder ``ladder`` (the bottom rung's spec)."""
    lad = ladder.ladder
    if rung == 0:
        return dataclasses.replace(ladder, ladder=dataclasses.replace(lad, rung=0, promoted=()))
    name = rung_name(ladder.name, lad.widths, rung)
    top_quiet = rung == len(lad.widths) - 1 and not lad.top_noise
    return dataclasses.replace(
        ladder,
        study=dataclasses.replace(ladder.study, name=name,
                                  n_trials=len(promoted) + lad.proposals,
                                  noise_repeats=0 if top_quiet else ladder.study.noise_repeats),
        start=StartSection(enqueue=tuple(p for _, p in promoted),
                           warm_start=rung_name(ladder.name, lad.widths, rung - 1)),
        ladder=dataclasses.replace(lad, rung=rung, promoted=tuple(n for n, _ in promoted)))


def promote(study: optuna.Study, share: float) -> Promoted:
    """The trials of a finished rung that climb (module docstring), best first."""
    objectives = study_objectives(study)
    recs = [r for r in trial_records(study) if r.feasible and not r.warm_start]
    if not recs:
        return []
    k = max(1, math.ceil(share * len(recs)))
    if len(objectives) == 1:
        o = objectives[0]
        sign = 1.0 if o.direction == "minimize" else -1.0
        order = sorted(recs, key=lambda r: (sign * r.values[o.name], r.number))
        sd = objective_noise(noise_sd(study.user_attrs), objectives).get(o.name)
        cut = order[k - 1].values[o.name]
        chosen = order[:k] + [r for r in order[k:] if sd is not None
                              and tied(r.values[o.name], cut, sd)]
    else:
        ranks = nondominated_ranks(minimised(recs, objectives))
        by_rank = sorted(zip(ranks.tolist(), recs), key=lambda x: (x[0], x[1].number))
        last = by_rank[k - 1][0]
        chosen = [r for rank, r in by_rank if rank <= last]
    return [(r.number, dict(r.params)) for r in chosen]


def rung_studies(ladder: StudySpec, storage: optuna.storages.BaseStorage
                 ) -> list[optuna.Study]:
    """The ladder's rung studies that exist in ``storage``, bottom first."""
    names = [rung_name(ladder.name, ladder.ladder.widths, i)
             for i in range(len(ladder.ladder.widths))]
    found = st.find_studies(names, storage)
    return [found[name] for name in itertools.takewhile(lambda n: n in found, names)]


def candidate_pairs(lower: optuna.Study, upper: optuna.Study
                    ) -> list[tuple[TrialRecord, TrialRecord]]:
    """(trial below, the same candidate above) for every promoted candidate the upper rung has
    finished: linked by the upper rung's ``ladder.promoted`` and each trial's start point."""
    promoted = st.stored_spec(upper).ladder.promoted
    below = {r.number: r for r in trial_records(lower)}
    above = {r.number: r for r in trial_records(upper)}
    pairs = []
    for t in upper.get_trials(deepcopy=False):
        point = str(t.user_attrs.get(records.START_POINT) or "")
        if not point.startswith("start.enqueue[") or not above[t.number].values:
            continue
        j = int(point.removeprefix("start.enqueue[").rstrip("]"))
        if j < len(promoted) and promoted[j] in below:
            pairs.append((below[promoted[j]], above[t.number]))
    return pairs


def ladder_stages(spec: StudySpec, url: str, log: Any = print) -> Stages:
    """The ladder's rungs as stages (`stage_runner.run_stages` runs them), bottom first, resuming
    those that exist; each rung above the bottom takes the candidates promoted from the rung
    below, and a rung with nothing to promote ends the ladder there (logged)."""
    promoted: Promoted = []
    for rung, width in enumerate(spec.ladder.widths):
        found = st.find_study_at(url, rung_name(spec.name, spec.ladder.widths, rung))
        if rung and found is not None:  # another's study of this rung's name is not adopted
            check_owned(found, spec.name)
        if rung and not promoted:
            log(f"ladder {spec.name}: no feasible trial at width "
                f"{spec.ladder.widths[rung - 1]}; nothing climbs to {width}")
            return
        rspec = rung_spec(spec, rung, promoted)
        if rung:
            log(f"ladder {spec.name}: {len(promoted)} candidate(s) climb to width {width} "
                f"({rspec.name}): trials {[n for n, _ in promoted]} of "
                f"{rung_name(spec.name, spec.ladder.widths, rung - 1)}")
        summary = yield Stage(rung, rspec, found is not None)
        promoted = promote(summary.study, spec.ladder.promote)


def rung_trials(study: optuna.Study) -> Sequence[TrialRecord]:
    """A rung's own finished trials (no warm-start copies)."""
    return [r for r in trial_records(study) if not r.warm_start]
