"""`moetune validate` says what it is doing while it re-trains, and refreshes the report after."""

from __future__ import annotations

from test_export_validate import make_study

from tuner.app.cli import main
from tuner.app.validate_command import refresh_report
from tuner.study.workflows.validate import validate_study
from tuner.testing import make_result


def test_each_trial_is_announced_before_it_trains_and_reports_how_far_it_got():
    lines: list[str] = []
    seen_at_start: list[list[str]] = []

    def two_evals(model_args, recipe, *, token_budget, on_eval, **_):
        seen_at_start.append(list(lines))  # what the user had been shown when training began
        for tokens in (token_budget // 2, token_budget):
            on_eval(tokens, {"val_loss": 3.0 - recipe.lr})
        return make_result(recipe, token_budget=token_budget, val_loss=2.0 + recipe.lr)

    validate_study(make_study(), top=2, scale=2, trainer=two_evals, record=False,
                   log=lines.append)
    assert "trial 0 (1/2): started, 200,000 tokens" in seen_at_start[0][-1]
    assert "trial 1 (2/2): started" in seen_at_start[1][-1]
    assert any(x.startswith("trial 0 (1/2): done, val_loss 2.0000 -> 2.0") for x in
               seen_at_start[1])  # the first result is out before the second run starts
    halfway = [x for x in lines if "100,000/200,000 tokens" in x]
    assert [x.split(":")[0] for x in halfway] == ["trial 0 (1/2)", "trial 1 (2/2)"]
    assert all(x.endswith(" elapsed") for x in lines if "tokens" in x or "started" in x)


def test_the_report_is_refreshed_with_the_validation(tmp_path):
    lines: list[str] = []
    study = make_study()
    validate_study(study, top=2, scale=2, trainer=_train, log=lines.append)
    refresh_report(study, tmp_path / "report", lines.append)
    md = (tmp_path / "report" / "ranked.md").read_text()
    transfer = md.split("## Transfer confidence")[1]
    assert "Not checked yet" not in transfer and "Spearman rank correlation 1" in transfer
    assert lines[-1] == f"report refreshed with the validation: {tmp_path / 'report'}"


def test_without_a_report_folder_it_says_how_to_refresh_it():
    lines: list[str] = []
    study = make_study()
    validate_study(study, top=2, scale=2, trainer=_train, log=lines.append)
    refresh_report(study, None, lines.append)
    assert "the report was not refreshed: run `moetune report synthetic`" in lines[-1]


def test_cli_progress_goes_to_stderr_and_results_to_stdout(tmp_path, capsys):
    make_study(tmp_path)
    rc = main(["validate", "synthetic", "--storage", f"sqlite:///{tmp_path / 'study.db'}",
               "--root", str(tmp_path), "--top", "2", "--trainer", "tuner.testing:quick_train"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "moetune validate: trial 0 (1/2): started" in captured.err
    assert "moetune validate: trial 1 (2/2): 200,000/200,000 tokens" in captured.err
    assert "started" not in captured.out and "Spearman rank correlation" in captured.out
    # the CLI refreshes the report where `moetune report` writes it by default
    report = tmp_path / "synthetic" / "report" / "ranked.md"
    assert "Not checked yet" not in report.read_text()


def _train(model_args, recipe, *, token_budget, **_):
    return make_result(recipe, token_budget=token_budget, val_loss=2.0 + recipe.lr)
