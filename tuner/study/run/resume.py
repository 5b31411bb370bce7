"""Resuming a study: which spec changes a resume may make, which trials count toward
``n_trials``, and reaping the trials a dead driver left RUNNING so they are re-run."""

from __future__ import annotations

import warnings
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.study.results.reasons import Reason
from tuner.study.results.trial_record import is_warm_start
from tuner.study.specs.spec import StudySpec
from tuner.study.store import records

INTERRUPTED = "interrupted"


class ResumeSpecError(ValueError):
    """A spec given on resume changes what the stored study's trials mean."""


# Fields a resume may change: how many trials, how they are placed and the guards around them,
# the noise re-runs after them (never trials), not what the trials measure.
RESUMABLE_CHANGES = frozenset({"study.n_trials", "study.max_concurrent",
                               "study.noise_repeats", "study.noise_top",
                               "resources.cpus_per_trial", "resources.gpus_per_trial",
                               "resources.trial_timeout_s", "data.max_corpus_gb"})
# A point whose trial was interrupted is queued again, but not past this many re-runs: a point
# that keeps taking its driver down (say, by exhausting the host's memory) must not stall a
# study that is resumed again and again.
MAX_RERUNS = 2


def check_resume_spec(stored: StudySpec, new: StudySpec) -> None:
    """Raise `ResumeSpecError` unless ``new`` only makes changes `RESUMABLE_CHANGES` allows.

    Everything else (objectives, constraints, space, budget, model, data, sampler, seed, …)
    decides what a trial measures or what is proposed next, so trials run under the old and
    the new value could not be compared in one study.
    """
    old, now = _flat(stored.to_dict()), _flat(new.to_dict())
    changed = sorted(k for k in old.keys() | now.keys() if old.get(k) != now.get(k))
    bad = [k for k in changed if k not in RESUMABLE_CHANGES]
    if new.study.n_trials < stored.study.n_trials:
        bad.append("study.n_trials")
    if bad:
        diffs = "; ".join(f"{k}: stored {_value(old, k)}, new {_value(now, k)}" for k in bad)
        raise ResumeSpecError(
            f"study {stored.name!r}: the spec differs from the one the study was submitted "
            f"with in {diffs}. On resume only {sorted(RESUMABLE_CHANGES)} may change "
            "(n_trials only upwards); submit under a new --name to change the rest.")


def _value(flat: dict[str, Any], key: str) -> str:
    return repr(flat[key]) if key in flat else "(unset)"


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):  # an empty table adds no key: {} and absent are the same
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def is_interrupted(t: FrozenTrial) -> bool:
    return t.state == TrialState.FAIL and t.user_attrs.get(records.REASON) == INTERRUPTED


def counts_toward_target(t: FrozenTrial) -> bool:
    """COMPLETE, PRUNED and real failures count toward n_trials; interrupted ones are re-run,
    and warm-start trials (measured by another study) never count."""
    if is_warm_start(t.user_attrs.get(records.ORIGIN)):
        return False
    if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return t.state == TrialState.FAIL and not is_interrupted(t)


def n_done(study: optuna.Study) -> int:
    return sum(counts_toward_target(t) for t in study.get_trials(deepcopy=False))


def reruns_of(study: optuna.Study, t: FrozenTrial) -> int:
    """How many times ``t``'s point has already been re-run (its RERUN_OF chain's length)."""
    by_number = {x.number: x for x in study.get_trials(deepcopy=False)}
    n, cur = 0, t
    while records.RERUN_OF in cur.user_attrs and cur.user_attrs[records.RERUN_OF] in by_number:
        n, cur = n + 1, by_number[cur.user_attrs[records.RERUN_OF]]
    return n


def reap_interrupted(study: optuna.Study, storage: optuna.storages.BaseStorage) -> list[int]:
    """Mark every RUNNING trial FAIL ("interrupted") and queue its params to be re-run (at
    most `MAX_RERUNS` times per point).

    Only the driver holding the study's lease (`tuner.study.store.lease`) calls this: with ask/tell
    there is no trial heartbeat, so a RUNNING trial after a driver died stays RUNNING forever
    unless reaped here.
    """
    reaped = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        storage.set_trial_user_attr(t._trial_id, records.OUTCOME, "fail")
        storage.set_trial_user_attr(t._trial_id, records.REASON, INTERRUPTED)
        storage.set_trial_user_attr(t._trial_id, records.REASONS,
                                    [Reason(kind="interrupted").to_list()])
        study.tell(t.number, state=TrialState.FAIL)
        reaped.append(t.number)
        if reruns_of(study, t) >= MAX_RERUNS:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study.enqueue_trial(t.params, user_attrs=records.rerun_attrs(t))
    return reaped
