"""The proxy's vocabulary share (tuner.modeling.vocab_share): in the report and the export."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from trainers import preset
from trainers.presets import count_params
from tuner.modeling.vocab_share import vocab_notes, vocab_share

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reports"))


def test_the_parameter_share_is_the_two_tables_over_the_built_model():
    a = dataclasses.replace(preset("proxy-s"), vocab_size=8192, mtp_depth=0)
    share = vocab_share(a, 256)
    total, _ = count_params(a)  # the modules themselves, built on the meta device
    assert share.params == pytest.approx(2 * 8192 * a.dim / total, rel=1e-9)


@pytest.mark.parametrize("name", ["proxy-s", "proxy-m"])
def test_a_real_vocabulary_takes_most_of_a_small_proxy(name):
    a = preset(name)
    small, big = (vocab_share(dataclasses.replace(a, vocab_size=v), 256) for v in (256, 129280))
    assert small.params < 0.05 and small.flops < 0.05
    assert big.params > 0.7 and big.flops > 0.8  # DeepSeek-V3's vocabulary at proxy width
    assert 0 < big.flops < 1 and 0 < big.params < 1


def test_the_export_note_names_both_vocabularies():
    proxy, target = preset("proxy-s"), dataclasses.replace(preset("proxy-s"), vocab_size=129280)
    (different,) = vocab_notes(proxy, target, 256)
    assert "256 tokens" in different and "keeps its own 129,280" in different
    (same,) = vocab_notes(target, target, 256)
    assert same.startswith("tuned at the full run's own vocabulary")


def test_the_report_states_the_share(tmp_path):
    from synthetic_studies import add, new_study

    import reports
    from trainers import Recipe

    study = new_study()
    add(study, values=[3.0, 1.0], trained=True)
    md = reports.build(study, tmp_path / "out")["ranked_md"].read_text()
    text = vocab_share(preset("debug"), Recipe().seq_len).sentence()
    assert f"- Vocabulary: T{text[1:]}." in md.splitlines()
    assert "256 tokens" in text


def test_every_trial_row_states_its_share(tmp_path):
    """The share per trial (trials.csv / .parquet), at the trial's own seq_len; none without a
    recipe on record."""
    from synthetic_studies import add, new_study

    import reports
    from reports.analysis.frame import trials_frame
    from trainers import Recipe

    study = new_study()
    add(study, values=[3.0, 1.0], trained=True)
    add(study, values=[3.1, 1.0], trained=True, recipe_extra={"seq_len": 64})
    add(study, state="fail")
    df = trials_frame(study)
    base, short = (vocab_share(preset("debug"), n) for n in (Recipe().seq_len, 64))
    assert list(df["vocab_params_share"][:2]) == pytest.approx([base.params, short.params])
    assert list(df["vocab_flops_share"][:2]) == pytest.approx([base.flops, short.flops])
    assert short.flops != base.flops and df["vocab_flops_share"].isna().tolist()[2]
    csv = reports.build(study, tmp_path / "out")["trials_csv"].read_text()
    assert "vocab_params_share" in csv.splitlines()[0]
