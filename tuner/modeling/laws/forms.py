"""The forms a law of the optimal LR can take, as a registry: each form's key (what law.json
writes under `tuner.modeling.laws.interface.FORM_KEY`), how it is fitted from cells, how it is
read back from its law.json entry, and its goodness of fit for the choice between forms.

Everything that fits an lr* law (a law study's fit, ``moetune law fit``) calls `fit_lr_law`,
and everything that reads one from law.json (law.md, ``moetune export --law``) calls
`read_lr_law`; they hand on an `tuner.modeling.laws.interface.LrForm`, and nothing after them
asks which form it is. A new form is its own module (a class implementing `LrForm`, a fit, a
``from_dict``) and one `LawForm` line in `FORMS`; ``tests/tuner/test_law_forms.py`` runs every
registered form through one conformance suite.

The choice: every form is fitted to the same cells and the one with the smallest AICc on them
is kept (`tuner.modeling.laws.lr_batch_law.cells_aicc`, the measure lr*(D, B) already chooses
its own shape by, log-linear or noise-scale: AICc estimates the held-out deviance, so a form
wins by fitting cells better for its number of coefficients); a tie keeps the earlier entry.
A form may decline the cells (`LawFitError`: too few for its coefficients); the others are
still compared.

    >>> law = fit_lr_law(cells)                     # doctest: +SKIP
    >>> read_lr_law(law.to_dict()).at(1e12, 2**22)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tuner.modeling.laws import lr_batch_law
from tuner.modeling.laws.interface import FORM_KEY, LrForm
from tuner.modeling.laws.lr_batch_law import Cell, LawFitError

# lr*(D, B): its law.json entry names no form (`FORM_KEY`), as it was written before forms
# had keys
DEFAULT_FORM = "lr-batch"

L = TypeVar("L", bound=LrForm)


@dataclass(frozen=True, kw_only=True)
class LawForm(Generic[L]):
    """One registered form: ``fit`` the law through cells (raising `LawFitError` where it
    declines them), ``read`` it from its law.json entry, and its ``aicc`` on cells."""

    key: str
    fit: Callable[[Sequence[Cell]], L]
    read: Callable[[Mapping[str, Any]], L]
    aicc: Callable[[L, Sequence[Cell]], float]


class UnknownFormError(ValueError):
    """A law.json entry names a form that is not registered."""


FORMS: dict[str, LawForm[Any]] = {f.key: f for f in (
    LawForm(key=DEFAULT_FORM, fit=lr_batch_law.fit_lr_batch_law,
            read=lr_batch_law.LrBatchLaw.from_dict, aicc=lr_batch_law.law_aicc),
)}


def fit_lr_law(cells: Sequence[Cell]) -> LrForm:
    """The registered form with the smallest AICc on ``cells`` (module docstring).

    Raises:
        LawFitError: every form declined the cells (the first form's reason).
    """
    fitted: list[LrForm] = []
    scores: list[float] = []
    declined: list[LawFitError] = []
    entries = list(FORMS.values())
    for form in entries:
        try:
            fitted.append(form.fit(cells))
        except LawFitError as e:
            declined.append(e)
            continue
        scores.append(form.aicc(fitted[-1], cells) if len(entries) > 1 else 0.0)
    if not fitted:
        raise declined[0]
    return fitted[scores.index(min(scores))]


def read_lr_law(entry: Mapping[str, Any]) -> LrForm:
    """The law a law.json entry holds (``lr_batch_law``, as ``to_dict`` wrote it), by the form
    its `FORM_KEY` names; an entry without one is lr*(D, B) (`DEFAULT_FORM`).

    Raises:
        UnknownFormError: the key names no registered form.
        KeyError, TypeError, ValueError, IndexError: the form's own fields are missing or
            mangled (its ``from_dict`` says which).
    """
    key = entry.get(FORM_KEY, DEFAULT_FORM)
    form = FORMS.get(key) if isinstance(key, str) else None
    if form is None:
        raise UnknownFormError(f"{FORM_KEY}: must be one of {sorted(FORMS)} (the registered "
                               f"lr* law forms), but got {key!r}")
    law: LrForm = form.read(entry)
    return law
