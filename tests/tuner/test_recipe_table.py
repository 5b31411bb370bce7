"""The recipe table: the shipped rows are sourced and counted once; a team's file with a bad row
gets one error naming the row, the column, the rule and the value, and nothing is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.app.cli import main
from tuner.modeling.anchor.recipe_table import RecipeTableError, load_recipes

ROW = """
[[recipe]]
name = "ours-7B"
family = "ours"
kind = "dense"
params_total = 7.0e9
params_active = 7.0e9
layers = 32
dim = 4096
vocab = 32000
tied = false
seq_len = 4096
tokens = 2.0e12
batch_start = 4194304
batch_end = 4194304
ramp_tokens = 0
lr = 3.0e-4
warmup = "2000 steps"
schedule = "cosine to 10%"
weight_decay = 0.1
optimizer = "adamw"
parametrization = "standard"
source = "our run 2026-03, wandb project x"
"""


def test_the_shipped_table_has_twenty_sourced_adamw_recipes_and_flags_the_rest() -> None:
    table = load_recipes()
    prior_rows = [r for r in table if r.in_prior]
    assert len(prior_rows) >= 20 and {r.kind for r in prior_rows} == {"dense", "moe"}
    assert all("arXiv:" in r.source for r in table)
    flagged = {r.name: r.flag for r in table if not r.in_prior}
    assert set(flagged) == {"Moonlight-16B-A3B", "Kimi-K2"}
    assert all("left out of the AdamW" in f for f in flagged.values())
    v3 = next(r for r in table if r.name == "DeepSeek-V3")
    # non-embedding: 37B active less 2 x 129,280 x 7,168 of embeddings
    assert v3.n_active == pytest.approx(37e9 - 2 * 129280 * 7168)
    assert v3.flops_per_token == pytest.approx(6 * v3.n_active + 6 * 61 * 7168 * 4096)


def test_a_teams_rows_come_first_and_are_marked(tmp_path: Path) -> None:
    own = tmp_path / "ours.toml"
    own.write_text(ROW)
    table = load_recipes(team=own)
    assert table[0].name == "ours-7B" and table[0].team and not table[1].team


@pytest.mark.parametrize(("edit", "field", "rule"), [
    (('source = "our run 2026-03, wandb project x"\n', ""), "recipe[0].source", "is required"),
    (('source = "our run 2026-03, wandb project x"', 'source = " "'), "recipe[0].source",
     "must be a non-empty string"),
    (("lr = 3.0e-4", "lr = -3.0e-4"), "recipe[0].lr", "must be a positive number"),
    (("lr = 3.0e-4", "lr = 0.3"), "recipe[0].lr", "a fraction, not percent"),
    (('optimizer = "adamw"', 'optimizer = "adam-ish"'), "recipe[0].optimizer",
     "must be one of ['adamw', 'muon'"),
    (("batch_end = 4194304", "batch_end = 1024"), "recipe[0].batch_end",
     "must be in tokens per step"),
    (("params_active = 7.0e9", "params_active = 0"), "recipe[0].params_active",
     "must be a positive number"),
    (("params_total = 7.0e9\nparams_active = 7.0e9", "params_total = 7.0\nparams_active = 7.0"),
     "recipe[0].params_active", "must exceed the embeddings"),
    (("tied = false", "tied = false\nnotes = 1"), "recipe[0].notes", "is not a column"),
])
def test_a_bad_row_names_row_column_rule_and_value(tmp_path: Path, edit: tuple[str, str],
                                                   field: str, rule: str) -> None:
    own = tmp_path / "ours.toml"
    own.write_text(ROW.replace(*edit))
    with pytest.raises(RecipeTableError) as e:
        load_recipes(team=own)
    assert e.value.field == field and rule in str(e.value)
    assert "ours-7B" in str(e.value) and "but got" in str(e.value)


def test_export_refuses_a_bad_recipes_file_with_exit_2_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    own = tmp_path / "ours.toml"
    own.write_text(ROW.replace("lr = 3.0e-4", "lr = -1.0"))
    out = tmp_path / "out.json"
    rc = main(["export", "nosuch", "--target", "deepseek-v3-671b", "--gpus", "2048",
               "--tokens", "14.8e12", "--recipes", str(own), "--out", str(out),
               "--storage", f"sqlite:///{tmp_path / 'none.db'}"])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists() and "Traceback" not in err
    assert "--recipes: recipe[0].lr (ours-7B" in err and "must be a positive number" in err
