"""Every command says a refused input the same way: ``moetune <command>: error: <message>``,
exit 2."""

from __future__ import annotations

import pytest

from tuner.app.cli import main

TARGET = ["--target", "deepseek-v3-671b", "--gpus", "2048", "--tokens", "14.8e12"]


@pytest.mark.parametrize(("command", "argv"), [
    ("status", ["status", "nope"]),
    ("report", ["report", "nope"]),
    ("compare", ["compare", "nope", "nada"]),
    ("validate", ["validate", "nope"]),
    ("export", ["export", "nope", *TARGET]),
])
def test_a_missing_study_is_said_with_one_prefix(tmp_path, capsys, command, argv):
    assert main([*argv, "--root", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"moetune {command}: error: no study 'nope'"), err
    assert not (tmp_path / "runs").exists()
