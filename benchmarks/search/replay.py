"""Replay a tuning study on the surrogate: Optuna ask/tell + an ASHA rule, in simulated time.

What is the same as a live ``moetune`` study: the sampler is built by
``tuner.study.trial.samplers.make_sampler`` from a real `StudySpec` (so the default is exactly what
the service runs), parameters are suggested by the spec's `SearchSpace`, trials are told exactly as
``tuner.study.trial.searcher`` tells them (COMPLETE with values and the diverged/out_of_memory
constraints, PRUNED without values), and ``max_concurrent`` trials run at once, asked when a slot
frees (so TPE's constant liar matters).

What is different: trainings are `Surrogate` lookups (interpolation of recorded real runs), the
clock is simulated (a trial reaches an evaluation at tokens / its recorded tokens_per_s), and ASHA
is `Asha` below, our re-implementation of Ray Tune's asynchronous successive halving rule (one
bracket, as ``tuner.study.run.runner._BudgetASHA`` configures it), not Ray's scheduler itself.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

from benchmarks.search.surrogate import Surrogate, SurrogateRun

optuna.logging.set_verbosity(optuna.logging.WARNING)

# Hypervolume reference point, pinned (objective orientation): a val_loss no recorded run that
# learned anything is worse than (uniform over 256 bytes is ln 256 = 5.55), and zero throughput.
REFERENCE = {"val_loss": 5.6, "tokens_per_s": 0.0}


class Asha:
    """Asynchronous successive halving, one bracket, minimising val_loss over tokens.

    Re-implements the decision of Ray Tune's ``ASHAScheduler`` (``_Bracket.on_result`` with
    ``stop_last_trials=False``) plus moetune's ``_BudgetASHA`` rule that a trial which trained its
    whole budget is never stopped: rungs at grace · rf^k below max_t; a trial reaching a rung it
    has not been recorded at is stopped if its value is worse than the (1 − 1/rf) quantile of
    the values recorded there so far (Ray compares rewards = −val_loss), and then recorded.
    """

    def __init__(self, *, max_t: int, grace: int, reduction_factor: float) -> None:
        self.rf = reduction_factor
        self.max_t = max_t
        n = int(math.log(max_t / grace) / math.log(reduction_factor) + 1)
        self.rungs: list[tuple[float, dict[int, float]]] = [
            (grace * reduction_factor ** k, {}) for k in reversed(range(n))]

    def decide(self, trial: int, tokens: int, val_loss: float) -> bool:
        """True = stop the trial now."""
        if tokens >= self.max_t:
            return False
        reward = -val_loss
        for milestone, recorded in self.rungs:
            if tokens >= milestone and trial in recorded:
                return False  # already passed this rung: the decision was made then
            if tokens < milestone:
                continue
            stop = False
            if recorded:
                cutoff = np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100)
                stop = bool(reward < cutoff)
            recorded[trial] = reward
            return stop
        return False


@dataclass
class Finished:
    """One trial as the study ended it, and the compute spent when it ended."""

    number: int
    state: str  # complete | infeasible | pruned
    values: tuple[float, float] | None  # (val_loss, tokens_per_s) of a complete trial
    tokens: int  # tokens this trial trained
    clock_s: float  # simulated wall time when it ended
    tokens_spent: float  # tokens trained by all trials (finished + running) at that time
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Replay:
    method: str
    seed: int
    objectives: tuple[str, ...] = ("val_loss", "tokens_per_s")
    trials: list[Finished] = field(default_factory=list)


@dataclass
class _Running:
    trial: optuna.Trial
    run: SurrogateRun
    start_s: float
    next_eval: int = 0


def replay(spec: Any, surrogate: Surrogate, *, method: str,
           token_budget: float | None = None, noise: float = 0.0) -> Replay:
    """Run ``spec`` (a `tuner.study.specs.spec.StudySpec`) to its n_trials on the surrogate.

    Args:
        token_budget: instead of stopping after n_trials, keep starting trials until this many
            training tokens are spent (equal compute for studies that prune and those that do
            not); the sampler is still the one the spec's n_trials configures.
        noise: standard deviation of a per-trial val_loss offset (the whole curve shifts, as a
            different training seed would shift it); 0 = the surrogate's noise-free landscape.
    """
    from tuner.study.results.outcome import constraint_names
    from tuner.study.trial.samplers import make_sampler

    study = optuna.create_study(directions=[d for _, d in spec.objectives],
                                sampler=make_sampler(spec))
    asha = None
    if spec.pruning.scheduler == "asha":
        asha = Asha(max_t=spec.budget.tokens_per_trial, grace=spec.pruning.grace_tokens,
                    reduction_factor=spec.pruning.reduction_factor)
    names = constraint_names(spec)
    out = Replay(method=method, seed=spec.study.seed,
                 objectives=tuple(n for n, _ in spec.objectives))
    if set(out.objectives) - set(REFERENCE):
        raise ValueError(f"objectives: the surrogate has {sorted(REFERENCE)}, but the spec asks "
                         f"for {list(out.objectives)}.")
    events: list[tuple[float, int, int]] = []  # (time, number, eval index)
    running: dict[int, _Running] = {}
    done_tokens = 0.0
    asked = 0

    def ask(now: float) -> None:
        nonlocal asked
        trial = study.ask()
        params = spec.space.suggest(trial)
        asked += 1
        run = surrogate.evaluate(params)
        if noise:
            rng = np.random.default_rng([spec.study.seed, trial.number])
            shift = float(rng.normal(0.0, noise))
            run = dataclasses.replace(run, curve=[(t, v + shift) for t, v in run.curve],
                                      val_loss=run.val_loss + shift)
        r = _Running(trial=trial, run=run, start_s=now)
        running[trial.number] = r
        _push(events, r)

    def spent(now: float) -> float:
        return done_tokens + sum(min(r.run.tokens_per_s * (now - r.start_s),
                                     r.run.curve[-1][0]) for r in running.values())

    def more(now: float) -> bool:
        if token_budget is None:
            return asked < spec.study.n_trials
        # Start a trial only if its whole budget still fits beside the running ones' budgets.
        committed = done_tokens + sum(r.run.curve[-1][0] for r in running.values())
        return committed + spec.budget.tokens_per_trial <= token_budget

    while asked < spec.study.max_concurrent and more(0.0):
        ask(0.0)
    while events:
        now, number, i = heapq.heappop(events)
        r = running[number]
        tokens, loss = r.run.curve[i]
        last = i == len(r.run.curve) - 1
        ended: tuple[str, tuple | None] | None = None
        if not math.isfinite(loss):
            ended = ("infeasible", None)  # the trainer stops a diverged run and says so
        elif last:
            ended = ("complete", (loss, r.run.tokens_per_s))
        elif asha is not None and asha.decide(number, tokens, loss):
            ended = ("pruned", None)
        if ended is None:
            r.next_eval = i + 1
            _push(events, r)
            continue
        state, values = ended
        del running[number]
        done_tokens += tokens
        if state == "pruned":
            study.tell(r.trial, state=TrialState.PRUNED)
        else:
            diverged = state == "infeasible"
            for name in names:
                r.trial.set_constraint(name, 1.0 if diverged and name == "diverged" else 0.0)
            if diverged:  # as outcome.py: worst observed val_loss, own throughput
                seen = [t.values[0] for t in study.get_trials(states=(TrialState.COMPLETE,))]
                values = (max(seen, default=REFERENCE["val_loss"]), r.run.tokens_per_s)
            pair = dict(zip(("val_loss", "tokens_per_s"), values, strict=True))
            study.tell(r.trial, values=[pair[n] for n in out.objectives])
        out.trials.append(Finished(number=number, state=state,
                                   values=values if state == "complete" else None,
                                   tokens=tokens, clock_s=now, tokens_spent=spent(now),
                                   params=dict(r.trial.params)))
        if more(now):
            ask(now)
    return out


def _push(events: list, r: _Running) -> None:
    tokens = r.run.curve[r.next_eval][0]
    heapq.heappush(events, (r.start_s + tokens / r.run.tokens_per_s, r.trial.number,
                            r.next_eval))


def hypervolume_curve(rep: Replay) -> list[tuple[int, float, float]]:
    """(trials ended, tokens spent, hypervolume of the complete trials so far) after each end."""
    from reports import hypervolume

    sign = {"val_loss": 1.0, "tokens_per_s": -1.0}  # as minimisation
    ref = [sign[n] * REFERENCE[n] for n in rep.objectives]
    pts: list[list[float]] = []
    out = []
    hv = 0.0
    for k, t in enumerate(rep.trials, 1):
        if t.values is not None:
            pair = dict(zip(("val_loss", "tokens_per_s"), t.values, strict=True))
            pts.append([sign[n] * pair[n] for n in rep.objectives])
            hv = hypervolume(np.array(pts), ref)
        out.append((k, t.tokens_spent, hv))
    return out


def best_loss_curve(rep: Replay) -> list[tuple[int, float, float]]:
    """(trials ended, tokens spent, best complete val_loss so far) after each end."""
    best = math.inf
    out = []
    for k, t in enumerate(rep.trials, 1):
        if t.values is not None:
            best = min(best, t.values[0])
        out.append((k, t.tokens_spent, best))
    return out
