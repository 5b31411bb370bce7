"""Every lr* law form in `tuner.modeling.laws.forms.FORMS` through one conformance suite: fitted
on synthetic cells, round-tripped through its law.json entry, read by the export at a point far
past its cells with a band that holds its value, its checks, and law.md's lines (a law study's
and a table's) rendered from it. A new form gets these checks by its registry line; the suite
also runs a test-only form flat in D (`flat_law_form`), which the tests below register to show
that a registered form reaches the law fit, ``moetune law fit``, ``--law`` and law.md with no
other edit."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from reports.laws.law import lr_batch_lines
from reports.laws.law_table import cells_law_data, law_table_markdown
from tests.tuner import flat_law_form
from tests.tuner import lr_batch_battery as battery
from tuner.app.cli import main
from tuner.modeling.laws import forms
from tuner.modeling.laws.interface import LawChecks, LrForm, LrLaw
from tuner.modeling.laws.lr_at_batch import lr_at_batch
from tuner.modeling.laws.lr_batch_law import Cell, LawFitError, LrBatchLaw

KEYS = sorted(forms.FORMS) + [flat_law_form.KEY]
FAR = (battery.FAR_D, battery.HELD_B)  # two decades past the cells in D, 4x past in B
POINTS = [(battery.TOKENS[0], battery.BATCHES[0]), (battery.HELD_D, battery.BATCHES[1]), FAR]
SOURCE = {"path": "runs.csv", "runs": 0, "columns": {"B": "bs"}, "batch_unit": 1.0}


@pytest.fixture
def registry(monkeypatch):
    """`forms.FORMS` with the test-only form flat in D registered beside the shipped ones."""
    monkeypatch.setitem(forms.FORMS, flat_law_form.KEY, flat_law_form.FORM)
    return forms.FORMS


@pytest.fixture
def two_forms(monkeypatch):
    """A registry of lr*(D, B) and the test-only form flat in D alone, so the choice between
    them is the tests' whatever else is registered."""
    both = {forms.DEFAULT_FORM: forms.FORMS[forms.DEFAULT_FORM],
            flat_law_form.KEY: flat_law_form.FORM}
    monkeypatch.setattr(forms, "FORMS", both)
    return both


def _cells(truth: str = "loglinear", seed: int = 0) -> list[Cell]:
    """One cell per (D, B) of the battery's grid, each from its own noisy bowl."""
    rng = np.random.default_rng(seed)
    cells = [battery.cell(truth, d, b, 0.01, rng) for d in battery.TOKENS
             for b in battery.BATCHES]
    return [c for c in cells if c is not None]


def _flat_cells(seed: int = 0) -> list[Cell]:
    """Cells whose lr* moves with B alone, measured to 0.03 decades."""
    rng = np.random.default_rng(seed)
    return [Cell(tokens=d, batch=b, se=0.03,
                 lr=10 ** (-3 + 0.4 * math.log10(b / 810) + rng.normal(0, 0.03)))
            for d in battery.TOKENS for b in battery.BATCHES]


@pytest.fixture(params=KEYS)
def fitted(request, registry) -> tuple[str, LrForm, list[Cell]]:
    cells = _cells()
    return request.param, registry[request.param].fit(cells), cells


def test_every_registered_form_is_an_lr_form_fitted_through_its_cells(fitted):
    _, law, cells = fitted
    assert isinstance(law, LrForm) and isinstance(law, LrLaw)
    assert 0 < law.n_cells <= len(cells)
    (d0, d1), (b0, b1) = law.tokens_range, law.batch_range
    assert d0 >= min(c.tokens for c in cells) and d1 <= max(c.tokens for c in cells)
    assert b0 >= min(c.batch for c in cells) and b1 <= max(c.batch for c in cells)
    assert isinstance(law.checks(), LawChecks)
    assert math.isfinite(law.tokens_exponent(b0))


def test_every_form_round_trips_through_its_law_json_entry(fitted):
    key, law, _ = fitted
    entry = json.loads(json.dumps(law.to_dict()))
    back = forms.read_lr_law(entry)
    assert type(back) is type(law) and back.to_dict() == law.to_dict()
    assert forms.FORMS[entry.get(forms.FORM_KEY, forms.DEFAULT_FORM)].key == key
    for d, b in POINTS:
        assert back.at(d, b) == pytest.approx(law.at(d, b), rel=1e-12)
        assert back.band(d, b) == pytest.approx(law.band(d, b), rel=1e-12)
        assert back.decades_past(d, b) == law.decades_past(d, b)
        assert back.interaction(d, b) == law.interaction(d, b)


def test_the_export_reads_every_form_far_past_its_cells_with_a_band_that_holds_it(fitted):
    _, law, _ = fitted
    d, b = FAR
    at = lr_at_batch(law, tokens=d, batch=b, flops_per_token=1.0)
    assert not at.refusal and at.lr == pytest.approx(law.at(d, b))
    assert at.band[0] <= at.lr <= at.band[1] and at.band[0] < at.band[1]
    assert at.decades_tokens == pytest.approx(math.log10(d / law.tokens_range[1]))
    assert at.law == law.name and at.form_error == law.checks().form_error


def test_every_forms_law_md_lines_render_from_the_law(fitted):
    _, law, cells = fitted
    full_run = {"tokens": 1e13, "batch": 6e7}
    study = "\n".join(lr_batch_lines({"lr_batch_law": law.to_dict(), "full_run": full_run}))
    assert law.describe() in study and f"{law.n_cells} (budget, batch) cells" in study
    assert all(isinstance(line, str) for line in law.notes() + law.term_lines((1e13, 6e7)))
    assert "At the full run (1e+13 tokens" in study or not law.term_lines((1e13, 6e7))
    table = law_table_markdown(cells_law_data(law, cells, source=SOURCE))
    assert law.formula() in table and "\n".join(law.coefficient_lines()) in table
    assert str(law.n_cells) in law.fit_summary()


def test_every_form_declines_too_few_cells_and_scores_the_cells_it_fits(fitted, registry):
    key, law, cells = fitted
    with pytest.raises(LawFitError):
        registry[key].fit(cells[:2])
    assert math.isfinite(registry[key].aicc(law, cells))


def test_the_fit_keeps_the_form_with_the_smallest_aicc(two_forms):
    """Cells flat in D: the form flat in D (2 coefficients) wins over lr*(D, B) (4); cells on
    a truth with D and D x B terms: lr*(D, B) stays. Without the flat form registered, flat
    cells get lr*(D, B)."""
    flat = _flat_cells()
    assert isinstance(forms.fit_lr_law(flat), flat_law_form.FlatInDLaw)
    assert isinstance(forms.fit_lr_law(_cells()), LrBatchLaw)
    del two_forms[flat_law_form.KEY]
    assert isinstance(forms.fit_lr_law(flat), LrBatchLaw)


def test_a_form_that_declines_leaves_the_choice_to_the_others(two_forms):
    """Four cells at two budgets: lr*(D, B) needs six and declines; the form flat in D fits."""
    cells = [c for c in _flat_cells() if c.tokens in battery.TOKENS[:2]][:4]
    with pytest.raises(LawFitError):
        forms.FORMS[forms.DEFAULT_FORM].fit(cells)
    assert isinstance(forms.fit_lr_law(cells), flat_law_form.FlatInDLaw)
    del two_forms[flat_law_form.KEY]
    with pytest.raises(LawFitError, match="needs at least"):
        forms.fit_lr_law(cells)


def test_an_entry_without_a_form_key_reads_as_lr_d_b_and_an_unknown_key_is_named():
    entry = forms.FORMS[forms.DEFAULT_FORM].fit(_cells()).to_dict()
    assert forms.FORM_KEY not in entry  # law.json as lr*(D, B) has always written it
    assert isinstance(forms.read_lr_law(entry), LrBatchLaw)
    with pytest.raises(forms.UnknownFormError) as e:
        forms.read_lr_law(dict(entry, law_form="quadratic"))
    assert str(e.value).startswith(f"law_form: must be one of {sorted(forms.FORMS)}")
    assert "lr-batch" in str(e.value) and str(e.value).endswith("but got 'quadratic'")


def _write_flat_runs(path) -> None:
    """A table whose cells' lr* moves with B alone (batch in tokens)."""
    rng = np.random.default_rng(0)
    lines = ["N,D,B,lr,loss"]
    for d in battery.TOKENS:
        for b in battery.BATCHES:
            m = -3 + 0.4 * math.log10(b / 810)
            for x in m + 0.15 * np.arange(-4, 5):
                loss = 3 + 0.6 * (x - m) ** 2 + rng.normal(0, 0.01)
                lines.append(f"1e8,{d},{b},{10 ** x:.6g},{loss:.5f}")
    path.write_text("\n".join(lines) + "\n")


def test_a_registered_form_reaches_law_fit_its_law_md_and_the_export_with_law(
        two_forms, tmp_path, capsys):
    """`moetune law fit` on runs flat in D writes the flat form (law.json names it, law.md
    states it); `moetune export --law` reads it at the batch it writes, and the LR there is
    that law's."""
    from tests.tuner.test_export import CONFIGS, _sqlite_study

    runs, out = tmp_path / "runs.csv", tmp_path / "law"
    _write_flat_runs(runs)
    assert main(["law", "fit", str(runs), "--out", str(out)]) == 0
    entry = json.loads((out / "law.json").read_text())["lr_batch_law"]
    assert entry[forms.FORM_KEY] == flat_law_form.KEY
    law = forms.read_lr_law(entry)
    assert law.formula() in (out / "law.md").read_text()
    assert "flat in D" in capsys.readouterr().err
    url = _sqlite_study(tmp_path)
    written = tmp_path / "full.json"
    assert main(["export", "synthetic", "--storage", url, "--target",
                 str(CONFIGS / "config_16B.json"), "--gpus", "64", "--tokens", "1e12",
                 "--global-batch", "512", "--law", str(out / "law.json"), "--lr-wide-band",
                 "--out", str(written)]) == 0, capsys.readouterr().err
    lr = json.loads(written.read_text())["lr"]
    assert lr["answer"]["law_lr"] == pytest.approx(law.at(1e12, 512 * 4096.0))
    rule = next(r["rule"] for r in json.loads(written.read_text())["rules"]
                if r["field"] == "lr")
    assert "fitted from a table of runs, law.json" in rule


def test_law_naming_an_unknown_form_exits_2_naming_the_key(tmp_path, capsys):
    from tests.tuner.test_export import CONFIGS, _sqlite_study

    entry = forms.FORMS[forms.DEFAULT_FORM].fit(_cells()).to_dict()
    bad, out = tmp_path / "law.json", tmp_path / "full.json"
    bad.write_text(json.dumps({"lr_batch_law": dict(entry, law_form="quadratic")}))
    rc = main(["export", "synthetic", "--storage", _sqlite_study(tmp_path), "--target",
               str(CONFIGS / "config_16B.json"), "--gpus", "64", "--tokens", "1e12",
               "--law", str(bad), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and not out.exists()
    assert f"--law: lr_batch_law.law_form: must be one of {sorted(forms.FORMS)}" in err
    assert "but got 'quadratic'" in err
