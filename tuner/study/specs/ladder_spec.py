"""The ``[ladder]`` section: a study that climbs proxy widths (`workflows.ladder` runs it).

    [ladder]
    widths = [64, 128, 256]   # model dims of the rungs, bottom to top: [model] at each width,
                              # same depth and experts (µP transfers the learning rate across
                              # width, not across depth or expert count)
    promote = 0.34            # share of a rung's feasible trials that climb (at least 1)
    mup = true                # µP with base width widths[0], so lr means the same on every rung
    proposals = 0             # new trials the sampler proposes at each upper rung, after the
                              # promoted ones (it sees every lower rung's trials)
    top_noise = true          # [study] noise_repeats on the top rung too (the answer's own
                              # noise for its report); false: only the rungs that promote
                              # measure it (the top's re-runs decide no promotion)

The bottom rung is the study ``[study] name`` with ``n_trials`` candidates; rung i > 0 is the
study ``<name>.w<width>`` in the same storage. ``rung`` and ``promoted`` are written by the
ladder into each rung's stored spec (which rung it is; which trials of the rung below it
evaluates, in the order of its ``[start] enqueue``), not by a user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainers.config.validation import FieldError, reject_unknown, require

RUNG_SEP = ".w"


class LadderError(FieldError):
    """A ``[ladder]`` value breaks a rule; the message names the field, the rule and the value."""


@dataclass(frozen=True, kw_only=True)
class LadderSection:
    widths: tuple[int, ...] = ()
    promote: float = 1 / 3
    mup: bool = True
    proposals: int = 0
    top_noise: bool = True
    rung: int = 0
    promoted: tuple[int, ...] = ()

    @property
    def on(self) -> bool:
        return bool(self.widths)

    @property
    def width(self) -> int:
        """This rung's model width."""
        return self.widths[self.rung]

    @property
    def top(self) -> bool:
        return self.rung == len(self.widths) - 1

    def to_dict(self) -> dict[str, Any]:
        """TOML-shaped; {} without a ladder (a study stored without one compares equal)."""
        if not self.on:
            return {}
        out: dict[str, Any] = {"widths": list(self.widths), "promote": self.promote,
                               "mup": self.mup, "proposals": self.proposals,
                               "top_noise": self.top_noise}
        if self.rung:
            out |= {"rung": self.rung, "promoted": list(self.promoted)}
        return out


def rung_name(study_name: str, widths: tuple[int, ...], rung: int) -> str:
    """The study of rung ``rung``: the ladder's own name at the bottom, ``<name>.w<width>``
    above."""
    return study_name if rung == 0 else f"{study_name}{RUNG_SEP}{widths[rung]}"


def parse_ladder(table: Any, *, study_name: str, name_re: Any) -> LadderSection:
    """Validate ``[ladder]`` (an empty table: no ladder).

    Raises:
        LadderError: naming the field, the rule and the value.
    """
    require(isinstance(table, Mapping), "ladder", "must be a table", table, error=LadderError)
    known = ("widths", "promote", "mup", "proposals", "top_noise", "rung", "promoted")
    reject_unknown(table, known, "ladder", error=LadderError)
    if not table:
        return LadderSection()
    widths: Any = table.get("widths")
    require(isinstance(widths, list) and len(widths) >= 2
            and all(_is_int(w) and w >= 8 for w in widths), "ladder.widths",
            "must be a list of at least 2 integer model widths >= 8", widths, error=LadderError)
    require(all(a < b for a, b in zip(widths, widths[1:])), "ladder.widths",
            "must increase from the bottom rung to the top", widths, error=LadderError)
    promote = table.get("promote", 1 / 3)
    require(isinstance(promote, int | float) and not isinstance(promote, bool)
            and 0 < promote <= 1, "ladder.promote",
            "must be a share in (0, 1] of a rung's feasible trials", promote, error=LadderError)
    mup = table.get("mup", True)
    require(isinstance(mup, bool), "ladder.mup", "must be true or false", mup, error=LadderError)
    proposals = table.get("proposals", 0)
    require(_is_int(proposals) and proposals >= 0, "ladder.proposals",
            "must be an integer >= 0", proposals, error=LadderError)
    top_noise = table.get("top_noise", True)
    require(isinstance(top_noise, bool), "ladder.top_noise", "must be true or false",
            top_noise, error=LadderError)
    rung = table.get("rung", 0)
    require(_is_int(rung) and 0 <= rung < len(widths), "ladder.rung",
            f"must be an integer in [0, {len(widths) - 1}] (written by the ladder)", rung,
            error=LadderError)
    promoted = table.get("promoted", [])
    require(isinstance(promoted, list) and all(_is_int(n) and n >= 0 for n in promoted),
            "ladder.promoted", "must be a list of trial numbers (written by the ladder)",
            promoted, error=LadderError)
    top = rung_name(study_name.rsplit(RUNG_SEP, 1)[0] if rung else study_name, tuple(widths),
                    len(widths) - 1)
    require(bool(name_re.fullmatch(top)), "study.name",
            f"must leave room for the rung suffix: the top rung's study would be {top!r}, "
            "past 64 characters", study_name, error=LadderError)
    return LadderSection(widths=tuple(widths), promote=float(promote), mup=mup,
                         proposals=proposals, top_noise=top_noise, rung=rung,
                         promoted=tuple(promoted))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
