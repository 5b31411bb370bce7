"""Bad input gets a clean error naming the field, the rule and the value (exit 2), never a
traceback; user text in outputs is made inert."""

from __future__ import annotations

import sqlite3
import struct
import subprocess
import sys

import pandas as pd
import pytest

from trainers.data import load_corpus
from tuner.app.cli import main
from tuner.study.specs.spec import SpecError, load_spec, parse_spec

SPACE = {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}}


@pytest.mark.parametrize("text, message", [
    ("a = " + "[" * 5000 + "]" * 5000, "nested too deep"),
    ("[study]\nname = \"x\"\nn_trials = " + "9" * 5000, "4300 digits"),
])
def test_hostile_toml_is_a_spec_error(tmp_path, text, message):
    path = tmp_path / "spec.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        load_spec(path)


def test_a_name_with_a_trailing_newline_is_refused():
    with pytest.raises(SpecError, match=r"study.name: .* but got 'x\\n'"):
        parse_spec({"study": {"name": "x\n"}, "space": SPACE})


@pytest.mark.parametrize("section, key, value", [
    ("resources", "trial_timeout_s", 0), ("data", "max_corpus_gb", -1.0)])
def test_limits_must_be_positive(section, key, value):
    with pytest.raises(SpecError, match=rf"{section}.{key}: must be > 0"):
        parse_spec({"study": {"name": "x"}, section: {key: value}, "space": SPACE})


def test_a_npy_header_that_is_a_list_is_refused(tmp_path):
    header = b"[1, 2]".ljust(118) + b"\n"
    path = tmp_path / "ids.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * 8)
    with pytest.raises(ValueError, match="header that is not a dict"):
        load_corpus(path, vocab_size=10)


def test_a_folder_corpus_is_mapped_from_one_cached_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MOETUNE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "text"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"hello ")
    (folder / "b.txt").write_bytes(b"world")
    first, again = load_corpus(folder), load_corpus(folder)
    assert bytes(first.tokens.tolist()) == b"hello world" and first.hash == again.hash
    assert len(list((tmp_path / "cache" / "corpora").glob("*.bytes"))) == 1
    with pytest.raises(ValueError, match=r"holds 1.1e-08 GB, more than the limit"):
        load_corpus(folder, max_bytes=10)


def test_a_corrupt_study_database_is_named_as_corrupt(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "study.db").write_bytes(b"not a database" * 100)
    assert main(["status", "s", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot be read as a SQLite database" in err and "does not exist" not in err
    with pytest.raises(sqlite3.DatabaseError):  # and it was left as it was
        sqlite3.connect(tmp_path / "s" / "study.db").execute("SELECT 1 FROM studies")


def test_a_non_numeric_port_is_a_storage_error(capsys):
    assert main(["list", "--storage", "postgresql://u:pw@localhost:abc/db"]) == 2
    err = capsys.readouterr().err
    assert "not a valid database URL" in err and "pw" not in err.replace("postgresql", "")


def test_root_that_is_a_file_is_refused_before_ray_starts(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert main(["resume", "x", "--root", str(tmp_path / "file")]) == 2
    assert "--root: must be a folder" in capsys.readouterr().err


def test_status_into_a_closed_pipe_ends_quietly(tmp_path):
    code = ("import sys; from tuner.app.cli import main; "
            f"sys.argv=['moetune', 'list', '--root', {str(tmp_path)!r}]; sys.exit(main())")
    for i in range(3):
        (tmp_path / f"s{i}").mkdir()
        (tmp_path / f"s{i}" / "study.db").write_text("")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader went away, as `| head` does
    assert proc.wait(timeout=60) == 1
    assert b"Traceback" not in (proc.stderr.read() if proc.stderr else b"")


def test_an_extreme_finite_objective_counts_as_non_finite():
    from optuna.trial import TrialState

    from tuner.study.results.trial_record import is_feasible

    assert not is_feasible(TrialState.COMPLETE, [-1e308], {})
    assert is_feasible(TrialState.COMPLETE, [-1e3], {})


def test_markdown_and_csv_neutralise_user_text():
    from reports.build import csv_safe
    from reports.sections.markdown import md_text

    assert md_text("<img src=x onerror=alert(1)>|x") == "&lt;img src=x onerror=alert(1)>\\|x"
    frame = pd.DataFrame({"reason": ["=HYPERLINK(\"x\")", "+1", "@SUM(A1)", "\tx", "-1.5", "ok"],
                          "val_loss": [-1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})
    out = csv_safe(frame)  # "+1" and "-1.5" read as numbers: no formula to run
    assert list(out["reason"]) == ["'=HYPERLINK(\"x\")", "+1", "'@SUM(A1)", "'\tx", "-1.5", "ok"]
    assert list(out["val_loss"]) == list(frame["val_loss"])  # numbers stay numbers
