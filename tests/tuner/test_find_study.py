"""Finding studies by name is one helper (`storage.find_study`, `storage.find_studies`): the
storage's names listed once, each study loaded once, none created by looking."""

from __future__ import annotations

import ast
from pathlib import Path

import optuna

from tuner.study.store import storage as st

ROOT = Path(__file__).resolve().parents[2]


def test_find_studies_keeps_the_asked_order_and_takes_loaded_studies_as_they_are(tmp_path):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'db.sqlite'}")
    for name in ("a", "b"):
        optuna.create_study(study_name=name, storage=storage)
    mine = optuna.load_study(study_name="a", storage=storage)
    found = st.find_studies(["x", "b", "a"], storage, loaded={"a": mine})
    assert list(found) == ["b", "a"]
    assert found["a"] is mine and found["b"].study_name == "b"
    assert st.find_study("x", storage) is None
    assert st.find_study("b", storage).study_name == "b"
    assert sorted(optuna.get_all_study_names(storage)) == ["a", "b"]  # nothing created


def test_no_function_lists_the_names_and_loads_a_study_itself():
    """The pattern ``name in study_names(...)`` then ``load_study(...)`` lives in storage.py."""
    both = []
    for path in sorted((ROOT / "tuner").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel == "tuner/study/store/storage.py":
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                calls = {ast.unparse(c.func).rsplit(".", 1)[-1] for c in ast.walk(fn)
                         if isinstance(c, ast.Call)}
                if {"study_names", "load_study"} <= calls:
                    both.append(f"{rel}:{fn.lineno} {fn.name}")
    assert not both, both
