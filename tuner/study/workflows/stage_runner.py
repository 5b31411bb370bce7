"""One runner for every kind of study: a plain study is one stage, a law's budgets and a ladder's
rungs are several, each an ordinary study in the one storage.

A kind says what its stages are as a generator (`law.law_stages`, `ladder.ladder_stages`): it
yields the next `stage.Stage` and is sent back the stage's `runner.StudySummary` once that stage
counts its ``n_trials`` (a ladder promotes from it; a law times it for its ETA). The loop
below is the only one: each stage goes through `runner.run_study` (the one preflight, then the
run), and a stage that ends short (Ctrl-C, a cancel, a stop) ends the whole run there, so
``moetune resume <name>`` goes on where it stopped. The command line and the service's
driver both call `run_stages`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.study.specs.ladder_spec import rung_name
from tuner.study.specs.law_spec import budget_name
from tuner.study.specs.spec import StudySpec
from tuner.study.store import database as db
from tuner.study.workflows.ladder import ladder_stages, rung_spec
from tuner.study.workflows.law import budget_spec, law_stages
from tuner.study.workflows.stage import Stages


def stage_count(spec: StudySpec) -> int:
    """How many stages a run of ``spec`` has when it runs to its end."""
    if spec.kind == "law":
        return len(spec.law.budgets)
    if spec.kind == "ladder":
        return len(spec.ladder.widths)
    return 1


def stage_names(spec: StudySpec) -> list[str]:
    """The study names of every stage after the first (a law's budgets, a ladder's rungs):
    studies only that law or ladder makes (`stage.check_owned`)."""
    if spec.kind == "law":
        return [budget_name(spec.name, spec.law, i) for i in range(1, len(spec.law.budgets))]
    if spec.kind == "ladder":
        return [rung_name(spec.name, spec.ladder.widths, i)
                for i in range(1, len(spec.ladder.widths))]
    return []


def first_stage(spec: StudySpec) -> StudySpec:
    """The spec of the run's first stage, the study named ``spec.name``: what the one preflight
    (`preflight.prepare`) checks a submit against (exists, resume rules) for every kind."""
    if spec.kind == "law":
        return budget_spec(spec, 0)
    if spec.kind == "ladder":
        return rung_spec(spec, 0, [])
    return spec


def reached_end(spec: StudySpec, summaries: list[Any]) -> bool:
    """Whether a run's summaries are its every stage, the last one complete."""
    return (len(summaries) == stage_count(spec) and bool(summaries)
            and summaries[-1].done >= summaries[-1].n_trials)


def _stages_of(spec: StudySpec, url: str, log: Callable[[str], None], plan: Any) -> Stages:
    if spec.kind == "law":
        return law_stages(spec, url, log, plan.found() if plan is not None else None)
    return ladder_stages(spec, url, log)


def run_stages(spec: StudySpec, *, run_dir: Path, plan: Any = None, storage: str = "",
               trainer: Any = None, address: str | None = None, progress: bool = True,
               stop: Any = None, interrupt: Any = None,
               log: Callable[[str], None] = print) -> list[Any]:
    """Run ``spec`` stage by stage; the summaries of the stages that ran, first to last.

    A plain study runs its prepared ``plan`` (`preflight.prepare`, made by the caller, who has
    reported its refusals); a law or a ladder closes the ``plan`` it is given (each stage has its
    own preflight) and runs its stages in ``run_dir``'s storage: stage 0 in ``run_dir``, stage
    i > 0 in ``<run_dir's parent>/<its study name>``.
    """
    from trainers import train  # torch and Ray load only when something runs
    from tuner.study.run.runner import run, run_study
    from tuner.study.trial.cluster import ray_cluster

    if spec.kind == "study":
        with plan:
            return [run(plan, trainer=trainer or train, address=address, progress=progress,
                        stop=stop, interrupt=interrupt)]
    if plan is not None:
        plan.close()
    url = db.storage_url(run_dir, storage, spec.study.storage)
    summaries: list[Any] = []
    with ray_cluster(address, spec):
        stages = _stages_of(spec, url, log, plan)
        stage = next(stages, None)
        while stage is not None:
            folder = run_dir if stage.index == 0 else run_dir.parent / stage.spec.name
            summary = run_study(stage.spec, run_dir=folder, storage=url, resume=stage.exists,
                                trainer=trainer or train, progress=progress, stop=stop,
                                interrupt=interrupt, found=stage.found)
            summaries.append(summary)
            if summary.done < stage.spec.study.n_trials or (stop is not None and stop.is_set()):
                break
            try:
                stage = stages.send(summary)
            except StopIteration:
                stage = None
    return summaries
