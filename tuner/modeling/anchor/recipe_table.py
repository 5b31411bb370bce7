"""The recipe table: published pretraining runs at full scale (and a team's own), as data.

The package ships ``recipes.toml`` (22 runs, dense and MoE, each with its source: paper and
section or table). A team adds its own past full runs in a file of the same form
(``moetune export --recipes FILE``, `load_recipes`); those rows are marked ``team`` and the prior
reads them first (`tuner.modeling.anchor.prior`). Every row is checked here once: a
`RecipeTableError` names the row, the column, the rule and the value, and nothing is read.

Counting, the same for every row and for the target asked about (`target_size`): non-embedding
parameters N = published parameters - vocab * dim (twice when input and output embeddings are
untied); non-embedding FLOPs per token M = 6 N_active + 6 layers * dim * seq_len, DeepSeek LLM's
M (arXiv:2401.02954 section 3.1: 72 n_layer d^2 + 6 n_layer d l_seq, whose first term is 6 N for
a standard block; an MoE counts its active experts); compute C = M * D.

    >>> table = load_recipes()
    >>> len([r for r in table if r.in_prior]) >= 20
    True
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.config.validation import FieldError

SHIPPED = Path(__file__).with_name("recipes.toml")
OPTIMIZERS = ("adamw", "muon", "muonclip", "adafactor", "lion", "sgd")
PARAMETRIZATIONS = ("standard", "mup")
KINDS = ("dense", "moe")
# What the prior assumes of a row; a row otherwise is listed, flagged, and left out of it
# (no stated rule converts a Muon or muP LR into an AdamW standard-parametrization one).
PRIOR_OPTIMIZER, PRIOR_PARAMETRIZATION = "adamw", "standard"
# A peak LR outside this, or a batch under MIN_BATCH_TOKENS, is a unit slip (a batch given in
# sequences, an LR in percent), not a recipe.
LR_RANGE = (1e-6, 1e-1)
MIN_BATCH_TOKENS = 16384
COLUMNS = ("name", "family", "kind", "params_total", "params_active", "layers", "dim", "vocab",
           "tied", "seq_len", "tokens", "batch_start", "batch_end", "ramp_tokens", "lr",
           "warmup", "schedule", "weight_decay", "optimizer", "parametrization", "source")


class RecipeTableError(FieldError):
    """A recipe table breaks a rule (``field``: ``recipe[i].column``)."""


@dataclass(frozen=True, kw_only=True)
class PublishedRun:
    """One run of the table (module docstring for the counting)."""

    name: str
    family: str
    kind: str
    params_total: float
    params_active: float
    layers: int
    dim: int
    vocab: int
    tied: bool
    seq_len: int
    tokens: float
    batch_start: float  # tokens per step
    batch_end: float
    ramp_tokens: float  # 0: constant, or a ramp whose length the source does not state
    lr: float
    warmup: str
    schedule: str
    weight_decay: float
    optimizer: str
    parametrization: str
    source: str
    team: bool = False  # a team's own past run (its file), not a published one

    @property
    def embedding(self) -> float:
        return float(self.vocab * self.dim * (1 if self.tied else 2))

    @property
    def n_active(self) -> float:
        """Non-embedding active parameters."""
        return self.params_active - self.embedding

    @property
    def n_total(self) -> float:
        """Non-embedding parameters, every expert counted."""
        return self.params_total - self.embedding

    @property
    def flops_per_token(self) -> float:
        """M with the active parameters (module docstring)."""
        return flops_per_token(self.n_active, self.layers, self.dim, self.seq_len)

    def compute(self, params: str = "active") -> float:
        """C = M * D, with M counted from the ``active`` or the ``total`` parameters."""
        n = self.n_active if params == "active" else self.n_total
        return flops_per_token(n, self.layers, self.dim, self.seq_len) * self.tokens

    @property
    def in_prior(self) -> bool:
        """Whether the row enters an AdamW standard-parametrization prior."""
        return (self.optimizer == PRIOR_OPTIMIZER
                and self.parametrization == PRIOR_PARAMETRIZATION)

    @property
    def flag(self) -> str:
        """Why the row stays out of the prior ('' when it is in)."""
        if self.in_prior:
            return ""
        return (f"{self.optimizer} / {self.parametrization}: left out of the AdamW "
                "standard-parametrization prior (no stated rule converts its LR)")


def flops_per_token(n_active: float, layers: int, dim: int, seq_len: int) -> float:
    """DeepSeek LLM's M: 6 N_active + 6 * layers * dim * seq_len."""
    return 6.0 * n_active + 6.0 * layers * dim * seq_len


def load_recipes(path: Path | None = None, *, team: Path | None = None) -> list[PublishedRun]:
    """The shipped table (``path`` None) or another file, and a team's own runs (``team``)
    first, marked as such.

    Raises:
        RecipeTableError: a file that cannot be read or parsed, or a row breaking a rule
            (the message names the row, the column, the rule and the value).
    """
    rows = [_row(r, i, where, team=True) for i, r, where in _rows(team)] if team else []
    rows += [_row(r, i, where) for i, r, where in _rows(path or SHIPPED)]
    names = [r.name for r in rows]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise RecipeTableError(f"recipe.name: must be unique across the tables, but got "
                               f"{dup} more than once.", "recipe.name")
    return rows


def _rows(path: Path) -> list[tuple[int, Mapping[str, Any], str]]:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise RecipeTableError(f"recipes: must be a readable file, but {str(path)!r}: "
                               f"{e.strerror or e}.", "recipes") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise RecipeTableError(f"recipes: must be TOML with [[recipe]] tables, but "
                               f"{str(path)!r} does not parse ({e}).", "recipes") from None
    table = data.get("recipe")
    if not isinstance(table, list) or not table:
        raise RecipeTableError(f"recipe: must be one or more [[recipe]] tables, but "
                               f"{str(path)!r} has none.", "recipe")
    return [(i, r, str(path)) for i, r in enumerate(table)]


def _fail(i: int, name: str, column: str, rule: str, value: Any, where: str) -> None:
    field = f"recipe[{i}].{column}"
    raise RecipeTableError(f"{field} ({name or 'unnamed'}, {where}): {rule}, but got "
                           f"{value!r}.", field, rule=rule, value=value)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _row(r: Any, i: int, where: str, *, team: bool = False) -> PublishedRun:
    name = str(r.get("name", "")) if isinstance(r, Mapping) else ""
    if not isinstance(r, Mapping):
        _fail(i, name, "", "must be a table", r, where)
    unknown = sorted(set(r) - set(COLUMNS))
    if unknown:
        _fail(i, name, unknown[0], f"is not a column; the columns are {list(COLUMNS)}",
              r[unknown[0]], where)
    for col in COLUMNS:
        if col not in r:
            _fail(i, name, col, "is required", None, where)
    for col in ("name", "family", "warmup", "schedule", "source"):
        if not isinstance(r[col], str) or not r[col].strip():
            _fail(i, name, col, "must be a non-empty string", r[col], where)
    for col, valid in (("kind", KINDS), ("optimizer", OPTIMIZERS),
                       ("parametrization", PARAMETRIZATIONS)):
        if r[col] not in valid:
            _fail(i, name, col, f"must be one of {list(valid)}", r[col], where)
    if not isinstance(r["tied"], bool):
        _fail(i, name, "tied", "must be true or false", r["tied"], where)
    for col in ("layers", "dim", "vocab", "seq_len"):
        if not (isinstance(r[col], int) and not isinstance(r[col], bool) and r[col] >= 1):
            _fail(i, name, col, "must be a positive integer", r[col], where)
    for col in ("params_total", "params_active", "tokens", "batch_start", "batch_end", "lr"):
        if not (_number(r[col]) and r[col] > 0):
            _fail(i, name, col, "must be a positive number", r[col], where)
    for col in ("ramp_tokens", "weight_decay"):
        if not (_number(r[col]) and r[col] >= 0):
            _fail(i, name, col, "must be a number >= 0", r[col], where)
    _check_units(r, i, name, where)
    return PublishedRun(**{c: r[c] for c in COLUMNS}, team=team)


def _check_units(r: Mapping[str, Any], i: int, name: str, where: str) -> None:
    """Rules across columns, and the unit slips they catch."""
    lo, hi = LR_RANGE
    if not lo <= r["lr"] <= hi:
        _fail(i, name, "lr", f"must be a peak LR in [{lo:g}, {hi:g}] (a fraction, not percent)",
              r["lr"], where)
    for col in ("batch_start", "batch_end"):
        if r[col] < MIN_BATCH_TOKENS:
            _fail(i, name, col, f"must be in tokens per step (>= {MIN_BATCH_TOKENS}; a batch "
                  "in sequences is sequences x seq_len)", r[col], where)
    if r["batch_start"] > r["batch_end"]:
        _fail(i, name, "batch_start", f"must be <= batch_end ({r['batch_end']:g})",
              r["batch_start"], where)
    if r["params_active"] > r["params_total"]:
        _fail(i, name, "params_active", f"must be <= params_total ({r['params_total']:g})",
              r["params_active"], where)
    if r["kind"] == "dense" and r["params_active"] != r["params_total"]:
        _fail(i, name, "params_active", "must equal params_total for a dense model",
              r["params_active"], where)
    emb = r["vocab"] * r["dim"] * (1 if r["tied"] else 2)
    if r["params_active"] <= emb:
        _fail(i, name, "params_active", f"must exceed the embeddings' vocab*dim"
              f"{'' if r['tied'] else '*2'} = {emb:.4g} (parameters, not billions)",
              r["params_active"], where)
    if r["ramp_tokens"] >= r["tokens"]:
        _fail(i, name, "ramp_tokens", f"must be below tokens ({r['tokens']:g})",
              r["ramp_tokens"], where)
