"""A command's reports (a study's, a law's, a ladder's) are written through one helper: each
file's path printed under its name, a failure a warning that leaves the exit code to the run."""

from __future__ import annotations

from pathlib import Path

from tuner.app import commands


def test_a_written_report_prints_each_file_under_its_name(capsys):
    paths = {"md": Path("r/law.md"), "json": Path("r/law.json")}
    assert commands._written("law report", lambda: paths) == paths
    assert capsys.readouterr().out.splitlines() == ["law report: r/law.md",
                                                    "law report: r/law.json"]


def test_a_failed_report_is_a_warning_naming_which_and_why(capsys):
    def broken():
        raise OSError("disk full")

    assert commands._written("ladder report", broken) is None
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == "warning: the ladder report could not be written: OSError: disk full\n"


def test_the_three_reports_go_through_the_one_helper():
    """No copy of the warn-and-print block beside it (there were three)."""
    text = Path(commands.__file__).read_text()
    assert text.count("could not be written") == 1
