"""The export decides the batch first, then the LR a law gives at that batch
(`tuner.modeling.laws.lr_at_batch`): a law fitted at one batch carries no LR to another."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import pytest

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from tuner.export import formats
from tuner.export.export import law_warnings
from tuner.modeling.full_run import ExportError, FullRunTarget, build_full_run, load_target
from tuner.modeling.hardware import get_hardware
from tuner.modeling.laws.interface import LawChecks, LrLaw
from tuner.modeling.laws.lr_at_batch import LawBatches, lr_at_batch
from tuner.modeling.laws.power_law import PowerLaw, StudyLaw

PROXY = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                  vocab_size=256, n_routed_experts=8, n_activated_experts=2, kv_lora_rank=32,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, mup_base_dim=64)
FIXED = 256.0  # the shipped law.toml's batch: 2 sequences of 128 tokens
TOKENS = int(14.8e12)


def power_law(coef: float, exponent: float, x_min: float = 1.6e4,
              x_max: float = 5.2e5) -> PowerLaw:
    """A known law whose replicates spread its exponent by +-0.02 (a band that widens away
    from the fitted range)."""
    reps = tuple((math.log10(coef) + d * 1.0, exponent - d / 5) for d in (-0.1, -0.05, 0, 0.05,
                                                                         0.1) * 20)
    return PowerLaw(coef=coef, exponent=exponent, exponent_interval=(exponent - 0.02,
                                                                      exponent + 0.02),
                    x_min=x_min, x_max=x_max, replicates=reps)


LAW = StudyLaw(name="law", variable="tokens", lr=power_law(0.05, -0.3))


def target(**kw) -> FullRunTarget:
    args, name = load_target("deepseek-v3-671b")
    return FullRunTarget(**({"model_args": args, "name": name, "hardware": get_hardware("h800"),
                             "gpus": 2048, "tokens": TOKENS, "seq_len": 4096} | kw))


ONE_BATCH = LawBatches.of([FIXED])


def export(law, *, batches=ONE_BATCH, **kw):
    return build_full_run(Recipe(lr=3e-3), PROXY, target(**kw), proxy_tokens=524_288,
                          law=law, law_batches=batches)


def test_a_law_fitted_at_one_batch_does_not_move_the_answer_at_another_batch():
    """Its LR is not carried to the full run's batch (no measured coupling): the answer is the
    published recipes' prior there, and it says why the law did not move it and what to run."""
    full = export(LAW)
    assert full.answer is not None and not full.answer.law_used
    assert full.hidden_lr == pytest.approx(full.answer.prior.value)
    assert full.recipe.lr == pytest.approx(full.hidden_lr * 7168 / 64)  # muP: the base LR
    rule = next(r.rule for r in full.rules if r.field == "lr")
    assert "does not move it" in rule and "256 tokens per step" in rule
    assert "batch searched" in rule and "moetune law fit" in rule  # what to run
    # --global-batch moves the batch and the LR with the prior's measured coupling, never the
    # law's LR fitted at 256 tokens
    other = export(LAW, global_batch=1024)
    assert other.answer is not None and not other.answer.law_used
    assert other.hidden_lr == pytest.approx(other.answer.prior.value)
    assert other.hidden_lr != pytest.approx(full.hidden_lr, rel=0.01)


def test_accepted_at_the_fitted_batch_the_lr_is_labelled_and_warned():
    full = export(LAW, lr_at_fitted_batch=True)
    assert full.recipe.lr == pytest.approx(LAW.lr.at(TOKENS))
    d = json.loads(formats.render("native", full))["lr"]
    batch = full.recipe.batch_end * 4096
    assert d["valid_at_batch"] == FIXED and d["for_batch_tokens"] == batch
    assert d["band"]["decades_past_batch"] == pytest.approx(math.log10(batch / FIXED))
    loud = [w for w in full.warnings if w.startswith("NOT MEASURED AT THIS BATCH")]
    assert len(loud) == 1 and "256 tokens per step" in loud[0]
    text = formats.render("megatron", full)
    assert "# WARNING: NOT MEASURED AT THIS BATCH" in text


def test_the_native_export_carries_the_band_as_numbers():
    full = export(LAW, lr_at_fitted_batch=True)
    band = json.loads(formats.render("native", full))["lr"]["band"]
    assert band["lo"] < full.recipe.lr < band["hi"] and band["level"] == 0.95
    assert (band["lo"], band["hi"]) == pytest.approx(LAW.lr.band(TOKENS))
    assert band["decades_past_tokens"] == pytest.approx(math.log10(TOKENS / 5.2e5))
    assert json.loads(formats.render("native", export(None)))["lr"]["band"] is None


def test_a_users_lr_is_written_as_given_with_the_laws_word_beside_it():
    full = export(LAW, lr=2e-2)
    rule = next(r for r in full.rules if r.field == "lr")
    assert full.recipe.lr == 2e-2 and rule.kind == "user"
    assert "refuses an LR at this batch" in rule.rule
    assert full.hidden_lr == pytest.approx(2e-2 * 64 / 7168)  # muP: hidden matrices


def test_a_law_along_its_batch_law_holds_inside_that_laws_band_only():
    law = StudyLaw(name="law", variable="tokens", lr=power_law(0.05, -0.3),
                   batch=power_law(0.5, 0.6))
    searched = LawBatches.of([256.0, 1024.0, 4096.0])
    full = export(law, batches=searched)  # the batch law combined with the prior's batch
    lo, hi = law.batch.band(TOKENS)
    assert full.batch_answer is not None and 0 < full.batch_answer.law_weight < 1
    assert lo <= full.recipe.batch_end * 4096 <= hi  # inside the batch law's band: it holds
    assert full.lr_at is not None and full.lr_at.lr == pytest.approx(law.lr.at(TOKENS))
    assert full.answer is not None and full.answer.law_used
    # outside the batch law's band the law measured nothing: the prior alone answers there,
    # and at 1M tokens per step for 671B, a batch below every published one, it is too wide
    small = export(law, batches=searched, global_batch=256, lr_wide_band=True)
    assert small.lr_at is not None and small.lr_at.lr is None
    assert "outside it" in small.lr_at.refusal
    assert small.answer is not None and not small.answer.law_used
    with pytest.raises(ExportError, match="does not move it.*outside it"):
        export(law, batches=searched, global_batch=256)


def test_at_its_own_batch_a_one_batch_law_gives_its_lr():
    at = lr_at_batch(LAW, tokens=5e5, batch=FIXED * 1.01, flops_per_token=1.0,
                     batches=LawBatches.of([FIXED]))
    assert at.lr == pytest.approx(LAW.lr.at(5e5)) and not at.refusal
    far = lr_at_batch(LAW, tokens=5e5, batch=FIXED * 4, flops_per_token=1.0,
                      batches=LawBatches.of([FIXED]))
    assert far.lr is None and far.law_lr == at.lr and far.valid_at_batch == FIXED


@dataclass(frozen=True)
class TwoVariableLaw:
    """lr*(D, B) = c * D^a * B^b, fitted on D in [1e4, 1e6], B in [256, 4096]."""

    name: str = "two"
    c: float = 1.0
    a: float = -0.2
    b: float = 0.3

    def at(self, tokens, batch, params=None):
        return self.c * tokens ** self.a * batch ** self.b

    def band(self, tokens, batch, params=None, level=0.95):
        return self.at(tokens, batch) / 1.5, self.at(tokens, batch) * 1.5

    def decades_past(self, tokens, batch):
        return {"tokens": max(0.0, math.log10(tokens / 1e6)),
                "batch": max(0.0, math.log10(batch / 4096))}

    params_range = None  # no N term

    def interaction(self, tokens, batch):
        return None

    def checks(self):
        return LawChecks(origin="study")


def test_a_two_variable_law_plugs_in_and_its_lr_follows_the_batch_written():
    law = TwoVariableLaw()
    assert isinstance(law, LrLaw)
    small, large = export(law, global_batch=2048), export(law, global_batch=8192)
    ratio = (large.recipe.batch_end / small.recipe.batch_end) ** law.b
    assert small.lr_at is not None and large.lr_at is not None
    assert large.lr_at.lr / small.lr_at.lr == pytest.approx(ratio)  # the law read at each batch
    assert large.recipe.lr != pytest.approx(small.recipe.lr, rel=0.05)  # the answer moves too
    d = json.loads(formats.render("native", large))["lr"]
    assert d["valid_at_batch"] is None and d["source"] == "scaled"
    assert d["band"]["decades_past_batch"] == pytest.approx(
        math.log10(large.recipe.batch_end * 4096 / 4096))
    assert d["band"]["decades_past_tokens"] == pytest.approx(math.log10(TOKENS / 1e6))


@dataclass(frozen=True)
class WideLaw(TwoVariableLaw):
    """The same law with a band 9x wide (hi / lo) wherever it is read."""

    def band(self, tokens, batch, params=None, level=0.95):
        return self.at(tokens, batch) / 3, self.at(tokens, batch) * 3


def test_a_band_wider_than_four_times_pins_no_lr_and_is_refused_unless_accepted():
    """Where the anchored answer's own band disowns it, a law's export is refused, naming the
    band and what to pass; --lr-wide-band writes it labelled; the user's --lr needs neither.
    Far below the recipe table (671B on 1e9 tokens) the prior is wide, and a wide law does
    not narrow it enough."""
    short = {"global_batch": 256, "tokens": 10**9}
    with pytest.raises(ExportError) as e:
        export(WideLaw(), **short)
    said = str(e.value)
    assert said.startswith("lr: the anchored answer does not pin the full run's LR")
    assert "(more than 4x)" in said and "--lr-wide-band" in said and "with --lr," in said
    full = export(WideLaw(), lr_wide_band=True, **short)
    assert full.answer is not None and full.answer.width > 4
    assert full.recipe.lr == pytest.approx(full.answer.lr)
    assert len([w for w in full.warnings if w.startswith("BAND WIDER THAN 4x")]) == 1
    own = export(WideLaw(), lr=1e-3, **short)
    assert own.recipe.lr == 1e-3 and not [w for w in own.warnings if "BAND WIDER" in w]
    # at the full run's own size the same wide law, combined with the prior, is answered
    near = export(WideLaw(), global_batch=2048)
    assert near.answer is not None and near.answer.width <= 4 and near.answer.law_used
    # the 9x law 7 decades out, whose band carries no bend past its data, weighs little there
    assert near.answer.law_weight < 0.1


def test_a_ramp_says_which_batch_the_lr_is_for_and_the_ramp_starts_optimum():
    law = TwoVariableLaw()
    full = build_full_run(Recipe(lr=3e-3, batch_schedule="linear", batch_start=2, batch_end=8),
                          PROXY, target(), proxy_tokens=524_288, law=law)
    d = json.loads(formats.render("native", full))["lr"]
    start = d["at_ramp_start"]
    assert d["for_batch_tokens"] == full.recipe.batch_end * 4096
    assert start["batch_tokens"] == full.recipe.batch_start * 4096
    assert start["law_lr"] == pytest.approx(law.at(TOKENS, start["batch_tokens"]))
    assert full.answer_at_start is not None
    assert start["lr"] == pytest.approx(full.answer_at_start.lr)
    assert start["band"][0] < start["lr"] < start["band"][1]


def test_each_launch_file_says_which_batch_its_lr_is_for_with_the_laws_band():
    """The launch files (Megatron, torchtitan, torchtitan's TOML) state the LR's rule in their
    header: the batch it is for, the law's band and its distances; with a ramp, the ramp
    start's LR beside it. Only the native file held these as numbers before."""
    law = TwoVariableLaw()
    full = export(law, global_batch=2048)
    lo, hi = (v * 64 / 7168 for v in law.band(TOKENS, 2048 * 4096))  # the hidden matrices'
    for fmt in ("megatron", "torchtitan", "torchtitan-toml"):
        head = next(line for line in formats.render(fmt, full).splitlines()
                    if line.startswith("# LR: "))
        assert head.startswith(f"# LR: base lr {full.recipe.lr:.4g} (muP; the hidden "
                               f"matrices' {full.hidden_lr:.4g}) for the final batch, 2048 x "
                               "4096 = 8,388,608 tokens per step: ")  # PROXY trains under muP
        assert f"[{lo:.3g}, {hi:.3g}]" in head and "decades past" in head
        assert "the published recipes' prior" in head and "weight" in head
    plain = build_full_run(Recipe(lr=3e-3), dataclasses.replace(PROXY, mup_base_dim=0),
                           target(global_batch=2048), proxy_tokens=524_288, law=law)
    assert plain.lr_line().startswith(f"lr {plain.recipe.lr:.4g} for the final batch, 2048 x")
    ramp = build_full_run(Recipe(lr=3e-3, batch_schedule="linear", batch_start=2, batch_end=8),
                          PROXY, target(), proxy_tokens=524_288, law=law)
    start = ramp.answer_at_start
    assert start is not None
    assert (f"at the ramp's first batch ({start.batch:,.0f} tokens per step) the anchored "
            f"answer is lr {start.lr:.4g}") in formats.render("megatron", ramp)


def test_warnings_compare_like_with_like_under_mup():
    """A published single LR trains every parameter: it is set against the LR the target's
    hidden matrices get (lr / width_mult), not the muP base LR."""
    base = 2.2e-4 * 7168 / 64  # its hidden matrices get DeepSeek-V3's LR
    full = export(LAW, lr=base)
    assert full.hidden_lr == pytest.approx(2.2e-4)
    said = law_warnings(full, LAW, target(lr=base))
    assert not any("DeepSeek-V3's published recipe" in w for w in said)
    low = export(LAW, lr=2.2e-4)  # the base LR at the published value: hidden 112x below
    said = law_warnings(low, LAW, target(lr=2.2e-4))
    assert any(w.startswith("the full run's LR of its hidden matrices")
               and "DeepSeek-V3's published recipe" in w for w in said)
    plain = build_full_run(Recipe(lr=2.2e-4), PROXY, target(lr=2.2e-4), proxy_tokens=524_288)
    assert any(w.startswith("outside published practice: LR of the hidden matrices")
               for w in plain.warnings)


PUBLISHED_RUNS = {  # target: (tokens, final batch in tokens, published lr), as the papers state
    "deepseek-v3-16b": (5.7e12, 4608 * 4096, 4.2e-4),
    "deepseek-v3-236b": (8.1e12, 9216 * 4096, 2.4e-4),
    "deepseek-v3-671b": (14.8e12, 15360 * 4096, 2.2e-4),
}


def test_the_backtest_exports_to_each_deepseek_run_at_its_own_tokens_and_batch():
    from tuner.export.backtest import backtest, backtest_table

    law = TwoVariableLaw()
    rows = backtest(law, proxy=PROXY)
    assert [r["target"] for r in rows] == list(PUBLISHED_RUNS)
    for r in rows:
        tokens, batch, published = PUBLISHED_RUNS[r["target"]]
        dim = load_target(r["target"])[0].dim
        assert (r["tokens"], r["batch_tokens"], r["published_lr"]) == (tokens, batch, published)
        assert r["lr"] == pytest.approx(law.at(tokens, batch))
        # like with like: the published single LR against the hidden matrices' lr / width_mult
        assert r["hidden_lr"] == pytest.approx(r["lr"] * 64 / dim)
        assert r["ratio"] == pytest.approx(r["hidden_lr"] / published)
    assert backtest_table(rows).count("\n| DeepSeek-") == 3
    # the anchored answer at each run, with every DeepSeek row out of its prior: the synthetic
    # law's narrow band 7 decades out does not drag it away from practice, which it holds
    for r in rows:
        a = r["anchored"]
        assert a["covered"] and 0.5 < a["ratio"] < 2, (r["target"], a)


def test_the_backtest_of_a_one_batch_law_refuses_and_shows_its_lr_where_measured():
    from tuner.export.backtest import backtest, backtest_lines, backtest_table

    rows = backtest(LAW, proxy=PROXY, batches=ONE_BATCH)
    assert all(r["lr"] is None and r["valid_at_batch"] == FIXED for r in rows)
    v3 = rows[-1]
    assert v3["hidden_lr_at_fitted_batch"] == pytest.approx(LAW.lr.at(14.8e12) * 64 / 7168)
    assert v3["decades_past_batch"] == pytest.approx(math.log10(15360 * 4096 / FIXED))
    assert "refused" in backtest_table(rows)
    assert all("refused" in line for line in backtest_lines(rows))
    full = export(LAW, lr_at_fitted_batch=True)
    full.backtest.extend(rows)
    assert json.loads(formats.render("native", full))["backtest"][-1]["target"] == \
        "deepseek-v3-671b"
