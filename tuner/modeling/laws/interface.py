"""What the full run's answer asks of a law of the optimal LR: one interface every form
implements, so the export, the answer and the reports read a law without probing for optional
attributes.

A law in tokens and batch (`LrLaw`) gives its value and band at (D, B, and N where it has an N
term: ``params_range``), how far a point lies past its data, the checks it carries
(`LawChecks`: where it comes from, its held-out check, whether one power law held, whether it
has a batch law), and its terms' D x B share where it has one. The forms:

- `tuner.modeling.laws.lr_batch_law.LrBatchLaw`: lr*(D, B) through (budget, batch) cells, a law
  study's (``origin`` ``study``);
- `tuner.export.answers.TableLaw`: a law of any registered form fitted from a table of runs by
  ``moetune law fit`` (``origin`` ``table``: no held-out budget);
- `tuner.modeling.laws.power_law.StudyLaw`: a law study's laws in D alone (and its lr*(D, B) when
  it searched 3 or more batches); read at a batch through
  `tuner.modeling.laws.lr_at_batch.lr_at_batch`, which carries its LR only where the batch was
  measured.

A form a law can take (`LrForm`) is an `LrLaw` that also says itself: the cells and ranges it
was fitted on, its D-exponent, its form in words and the lines law.md prints of it, and its
law.json entry. The forms are registered in `tuner.modeling.laws.forms`, which fits every one
on a law's cells and keeps the best, and reads any one back from law.json. A new form is its
own module with these methods and one line in that registry;
`tuner.modeling.laws.lr_at_batch.lr_at_batch` reads it at the batch the export writes, and the
answer (`tuner.modeling.anchor.answer`) weighs that reading against the published recipes'
prior.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

ORIGINS = ("study", "table")
# law.json's key naming an lr* law's form (`LrForm.to_dict`), read by
# `tuner.modeling.laws.forms.read_lr_law`; an entry without it is lr*(D, B)
FORM_KEY = "law_form"


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


@runtime_checkable
class LrForm(LrLaw, Protocol):
    """A form of the lr law that `tuner.modeling.laws.forms` fits and reads: an `LrLaw` that
    also writes its law.json entry and the text law.md prints of it (a law study's and a
    table's), so no report asks which form it holds."""

    @property
    def n_cells(self) -> int:
        """The cells it was fitted through."""

    @property
    def tokens_range(self) -> tuple[float, float]:
        """The tokens D its uncensored cells span."""

    @property
    def batch_range(self) -> tuple[float, float]:
        """The batches B (tokens per step) its uncensored cells span."""

    def tokens_exponent(self, batch: float) -> float:
        """d log lr* / d log D at ``batch`` (0 for a form flat in D)."""

    def describe(self) -> str:
        """The form in words (law.json's ``form``; law.md's "Modeled: lr* ...")."""

    def notes(self) -> list[str]:
        """A law study's law.md: sentences on the fit between its cells and its value at the
        largest cell (exponents, scatter, what its band carries); may be empty."""

    def term_lines(self, full_run: tuple[float, float] | None) -> list[str]:
        """A law study's law.md: the lines on its D x B term, and what that term gives at the
        full run's (tokens, batch) when known; empty for a form without one."""

    def formula(self) -> str:
        """A table's law.md: the form's line ("Modeled: ..."), its coefficients named."""

    def coefficient_lines(self) -> list[str]:
        """A table's law.md: its coefficients and how well they fit the cells."""

    def fit_summary(self) -> str:
        """One line for the terminal: the cells and how well it fits them."""

    def to_dict(self) -> dict[str, Any]:
        """Its law.json entry; `tuner.modeling.laws.forms.read_lr_law` reads it back (an entry
        of any form but lr*(D, B) names its form under `FORM_KEY`)."""
