"""`moetune report` / `moetune compare` on studies in a sqlite storage."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from synthetic_studies import add, new_study, random_study

from reports.analysis.hypervolume import hypervolume
from tuner.app import report_command
from tuner.study.store import database as db


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="moetune")
    report_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_the_moetune_cli_has_both_commands() -> None:
    from tuner.app.cli import build_parser
    parser = build_parser()
    assert parser.parse_args(["report", "s1"]).handler is report_command.run_report
    assert parser.parse_args(["compare", "a", "b"]).handler is report_command.run_compare


def test_report_command_writes_the_files_and_prints_the_top(tmp_path, capsys) -> None:
    url = db.storage_url(tmp_path / "s1", "")
    (tmp_path / "s1").mkdir()
    src = random_study(n=15)
    study = new_study("s1", storage=url)
    for t in src.trials:
        study.add_trial(t)
    assert run(["report", "s1", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "rank  trial  val_loss  peak_memory_gb" in out
    for name in ("trials.csv", "trials.parquet", "ranked.md", "report.html", "pareto.png"):
        assert (tmp_path / "s1" / "report" / name).exists(), name


def test_unknown_study_exits_2_and_writes_nothing(tmp_path, capsys) -> None:
    url = db.storage_url(tmp_path / "s1", "")
    (tmp_path / "s1").mkdir()
    new_study("s1", storage=url)
    out = tmp_path / "out"
    assert run(["report", "nope", "--storage", url, "--out", str(out)]) == 2
    assert "no study named 'nope'" in capsys.readouterr().err and not out.exists()
    assert run(["report", "ghost", "--root", str(tmp_path), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err and not out.exists()


def test_bad_reference_point_exits_2_and_writes_nothing(tmp_path, capsys) -> None:
    url = db.storage_url(tmp_path / "s1", "")
    (tmp_path / "s1").mkdir()
    study = new_study("s1", storage=url)
    add(study, values=[3.0, 1.0], constraints={"max_peak_memory_gb": -3.0})
    out = tmp_path / "out"
    assert run(["report", "s1", "--storage", url, "--out", str(out),
                "--reference-point", "4"]) == 2
    assert "one value per objective" in capsys.readouterr().err and not out.exists()


def test_compare_uses_one_reference_point(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'both.db'}"
    a, b = new_study("a", storage=url), new_study("b", storage=url)
    for v in ([1.0, 3.0], [3.0, 1.0]):
        add(a, values=v, constraints={"max_peak_memory_gb": -1.0})
    for v in ([2.0, 2.0], [4.0, 4.0]):
        add(b, values=v, constraints={"max_peak_memory_gb": -1.0})
    out = tmp_path / "cmp"
    assert run(["compare", "a", "b", "--storage", url, "--out", str(out),
                "--reference-point", "5", "5"]) == 0
    md = (out / "compare.md").read_text()
    ha = hypervolume(np.array([[1.0, 3.0], [3.0, 1.0]]), [5.0, 5.0])  # 4·2 + 2·2 = 12
    hb = hypervolume(np.array([[2.0, 2.0]]), [5.0, 5.0])  # 9
    assert (ha, hb) == (12.0, 9.0)
    assert "| a | 2 | 2 | 2 | 12 |" in md and "| b | 2 | 2 | 1 | 9 |" in md
    assert "val_loss = 5, peak_memory_gb = 5" in md
    assert (out / "compare.html").exists() and (out / "compare.png").exists()
    wrote = f"compare: wrote {out / 'compare.md'}, {out / 'compare.html'}"
    assert wrote in capsys.readouterr().out


def test_compare_refuses_different_objectives(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'both.db'}"
    new_study("a", storage=url)
    new_study("b", storage=url, objectives=[["val_loss", "minimize"]])
    out = tmp_path / "cmp"
    assert run(["compare", "a", "b", "--storage", url, "--out", str(out)]) == 2
    assert "same objectives" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("argv", [["report"], ["compare", "a"]])
def test_missing_arguments_are_usage_errors(argv) -> None:
    with pytest.raises(SystemExit) as exc:
        run(argv)
    assert exc.value.code == 2


def test_compare_says_when_the_studies_are_not_like_for_like(tmp_path) -> None:
    import reports
    from tuner.study.store import records
    a, b = new_study("a"), new_study("b")
    for study, every in ((a, 50_000), (b, 25_000)):
        study.set_user_attr(records.SPEC, {"budget": {"tokens_per_trial": 100_000,
                                                      "eval_every_tokens": every},
                                           "model": {"preset": "debug"}})
        add(study, values=[3.0, 1.0], constraints={"max_peak_memory_gb": -1.0})
    md = reports.compare(a, b, tmp_path)["compare_md"].read_text()
    assert ("Not like for like: [budget] differs: a {'tokens_per_trial': 100000, "
            "'eval_every_tokens': 50000} vs b") in md
    assert "[model] differs" not in md
    assert "Both studies trained 100000 tokens per trial." in md
    assert "Compared at equal budgets: 1 finished trial per study." in md
    assert "is compared" not in md and "are compared" not in md  # equal counts: none cut
    assert "derived from the worst feasible value of each objective in both studies" in md
    add(b, values=[2.5, 1.5], constraints={"max_peak_memory_gb": -1.0})
    md = reports.compare(a, b, tmp_path)["compare_md"].read_text()
    assert "b finished 2 trials and a 1: only b's first finished trial (#0) is compared." in md
    assert "| b | 1 | 1 | 1 |" in md  # the later, better trial of b is not compared


def test_compare_refuses_different_tokens_per_trial(tmp_path, capsys) -> None:
    from tuner.study.store import records
    url = f"sqlite:///{tmp_path / 'both.db'}"
    for name, tokens in (("a", 150_000), ("b", 100_000)):
        study = new_study(name, storage=url)
        study.set_user_attr(records.SPEC, {"budget": {"tokens_per_trial": tokens}})
        add(study, values=[3.0, 1.0], constraints={"max_peak_memory_gb": -1.0})
    out = tmp_path / "cmp"
    assert run(["compare", "a", "b", "--storage", url, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "compared only at equal budgets" in err and "tokens_per_trial" in err
    assert "a=150000, b=100000" in err and "Traceback" not in err and not out.exists()


def _study_with_a_report(tmp_path) -> tuple[str, object]:
    url = db.storage_url(tmp_path / "s1", "")
    (tmp_path / "s1").mkdir()
    study = new_study("s1", storage=url)
    for v in ([3.0, 1.0], [2.0, 2.0]):
        add(study, values=v, constraints={"max_peak_memory_gb": -2.0})
    assert run(["report", "s1", "--root", str(tmp_path)]) == 0
    return url, tmp_path / "s1" / "report"


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_non_finite_reference_point_exits_2_and_keeps_the_old_report(tmp_path, capsys,
                                                                     value) -> None:
    from tuner.app.cli import main
    _, report = _study_with_a_report(tmp_path)
    before = {p.name: p.read_bytes() for p in report.iterdir()}
    capsys.readouterr()
    assert main(["report", "s1", "--root", str(tmp_path), "--reference-point", value, "0"]) == 2
    captured = capsys.readouterr()
    assert "--reference-point: every value must be a finite number" in captured.err
    assert value in captured.err and "Traceback" not in captured.err and not captured.out
    assert {p.name: p.read_bytes() for p in report.iterdir()} == before


def test_library_refuses_a_nan_reference_point_before_writing(tmp_path) -> None:
    import reports
    study = new_study()
    add(study, values=[3.0, 1.0], constraints={"max_peak_memory_gb": -2.0})
    with pytest.raises(ValueError, match="finite number"):
        reports.build(study, tmp_path / "out", reference_point=[float("nan"), 0.0])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sub", ["", "inner"])
def test_out_that_is_a_file_exits_2_naming_out(tmp_path, capsys, sub) -> None:
    from tuner.app.cli import main
    _study_with_a_report(tmp_path)
    afile = tmp_path / "notes.txt"
    afile.write_text("keep me")
    out = afile / sub if sub else afile
    capsys.readouterr()
    for argv in (["report", "s1"], ["compare", "s1", "s1"]):
        assert main([*argv, "--root", str(tmp_path), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "--out: must be a folder" in err and str(afile) in err
        assert "Traceback" not in err
    assert afile.read_text() == "keep me"
