"""What the full run's answer asks of a law of the optimal LR: one interface every form
implements, so the export, the answer and the reports read a law without probing for optional
attributes.

A law in tokens and batch (`LrLaw`) gives its value and band at (D, B, and N where it has an N
term: ``params_range``), how far a point lies past its data, the checks it carries
(`LawChecks`: where it comes from, its held-out check, whether one power law held, whether it
has a batch law), and its terms' D x B share where it has one. The forms:

- `tuner.modeling.laws.lr_batch_law.LrBatchLaw`: lr*(D, B) through (budget, batch) cells, a law
  study's (``origin`` ``study``);
- `tuner.export.answers.TableLaw`: the same law fitted from a table of runs by ``moetune law
  fit`` (``origin`` ``table``: no held-out budget);
- `tuner.modeling.laws.power_law.StudyLaw`: a law study's laws in D alone (and its lr*(D, B) when
  it searched 3 or more batches); read at a batch through
  `tuner.modeling.laws.lr_at_batch.lr_at_batch`, which carries its LR only where the batch was
  measured.

A new form is its own module with these methods; `tuner.modeling.laws.lr_at_batch.lr_at_batch`
reads it at the batch the export writes, and the answer (`tuner.modeling.anchor.answer`) weighs
that reading against the published recipes' prior.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

ORIGINS = ("study", "table")


@dataclass(frozen=True, kw_only=True)
class LawChecks:
    """What a law carries besides its value: where it comes from (``study``: a law study's own,
    ``table``: ``moetune law fit``'s), its held-out check (None: none made, or none possible),
    whether one power law held through its budgets (``lack_of_fit_p``, None: not tested),
    whether it has a batch law B*(D), and whether its band carries model-form error."""

    origin: str = "study"
    held_out: Mapping[str, Any] | None = None
    lack_of_fit_p: float | None = None
    batch_law: bool = False
    # its band carries model-form error past its data (lr*(D, B)'s mixture with a law bent in
    # D); a band that does not gets `tuner.modeling.anchor.answer.FORM_SD_PER_DECADE`
    form_error: bool = False

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise ValueError(f"origin: must be one of {list(ORIGINS)}, but got {self.origin!r}.")


@runtime_checkable
class LrLaw(Protocol):
    """A law in tokens D and batch B (tokens per step); ``params``: N (non-embedding) for a law
    with an N term."""

    @property
    def name(self) -> str: ...

    @property
    def params_range(self) -> tuple[float, float] | None:
        """The model sizes N its cells span; None: no N term (fitted at one size)."""

    def at(self, tokens: float, batch: float, params: float | None = None) -> float: ...

    def band(self, tokens: float, batch: float, params: float | None = None,
             level: float = 0.95) -> tuple[float, float]: ...

    def decades_past(self, tokens: float, batch: float) -> Mapping[str, float]: ...

    def interaction(self, tokens: float, batch: float) -> dict[str, Any] | None: ...

    def checks(self) -> LawChecks: ...
