"""The full run's answer anchored on the published recipes: the prior backtested over the recipe
table, and the shipped law study's real fits combined with it at DeepSeek-V3's full run.

Three measurements, all modeled (no training: the recipe table and fits already stored):

1. `tuner.modeling.anchor.backtest` over the shipped table: every AdamW recipe predicted by the
   prior fitted without it (its family's other runs placing the lab, as a team's own runs do)
   and without its whole family (a new lab), the form chosen afresh in each fit.
2. Each seed of benchmarks/law_grid.json (`search_spaces/law.toml` as shipped, real trainings
   on the CPU, 4 budgets x 3 batches, µP at base width 64; `bench_law.py grid`): its lr*(D, B)
   law read at 671B on 14.8T tokens through the export itself (`build_full_run`, 2048 H800s,
   the batch the export writes), the law alone against the anchored answer: LR, band, the
   law's weight.
3. The same fits asked for DeepSeek-V2-Lite, V2 and V3 at their published tokens and final
   batch with every DeepSeek row out of the prior, so that nothing DeepSeek published enters
   the answer it is held against.

    python benchmarks/bench_law.py anchored
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from benchmarks.law.common import BENCH
from benchmarks.results_md import publish

HEADING = "## The full run's LR anchored on the published recipes (issue 54)"
TARGETS = {"median": 1.4, "coverage": 0.9, "width": 4.0, "deepseek": 2.0}


def add_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no options: everything it reads is shipped


def _table_lines() -> list[str]:
    from tuner.modeling.anchor.backtest import backtest_markdown, summary, table_backtest
    from tuner.modeling.anchor.prior import fit_prior
    from tuner.modeling.anchor.recipe_table import load_recipes

    table = load_recipes()
    rows = table_backtest(table)
    one, fam = summary(rows, "recipe_out"), summary(rows, "family_out")
    met = (one["median_miss"] <= TARGETS["median"] and one["coverage"] >= TARGETS["coverage"]
           and one["max_width"] <= TARGETS["width"])
    ds = [r for r in rows if r["recipe"] in ("DeepSeek-V2-Lite", "DeepSeek-V2", "DeepSeek-V3")]
    ds_met = all(1 / TARGETS["deepseek"] < r["family_out"]["ratio"] < TARGETS["deepseek"]
                 for r in ds)
    verdict = ("met" if met else "met but for the widest band"
               if one["median_width"] <= TARGETS["width"] else "not met")
    return [
        "### The prior, each recipe left out", "",
        "Command: `python benchmarks/bench_law.py anchored` (`moetune law backtest` prints the "
        "same table). Modeled: published LRs are what labs chose, not measured optima.", "",
        f"Prior on the whole table: {fit_prior(table).summary()}.", "",
        backtest_markdown(rows), "",
        f"- **Target, one recipe out (median miss <= {TARGETS['median']}x, >= "
        f"{TARGETS['coverage']:.0%} inside their 95% band, band <= {TARGETS['width']:g}x): "
        f"{verdict}"
        f"**: median {one['median_miss']:.2f}x, {one['coverage']:.0%} inside, band median "
        f"{one['median_width']:.2f}x, largest {one['max_width']:.2f}x (the recipe furthest "
        "from the others in compute and batch: its leverage widens its band, as it should).",
        f"- **Target, DeepSeek-V2-Lite, V2 and V3 each within 2x with every DeepSeek row out: "
        f"{'met' if ds_met else 'not met'}**: "
        + ", ".join(f"{r['recipe']} {r['family_out']['ratio']:.2f}x" for r in ds) + ".",
        f"- A new lab (its whole family out): median {fam['median_miss']:.2f}x, "
        f"{fam['coverage']:.0%} inside (the misses are one family, LLaMA, predicted without "
        "any LLaMA row: one family out of five, not three independent misses), band median "
        f"{fam['median_width']:.2f}x. This is the band a team gets with no run of its own in "
        "the table; its own runs (`--recipes`) place it and narrow it to the one-recipe-out "
        "figures."]


def _law_lines() -> list[str]:
    from trainers.config.recipe import Recipe
    from trainers.presets import preset
    from tuner.modeling.anchor.answer import answer_lr
    from tuner.modeling.anchor.prior import fit_prior
    from tuner.modeling.anchor.recipe_table import load_recipes
    from tuner.modeling.full_run import FullRunTarget, build_full_run, load_target, run_point
    from tuner.modeling.hardware import get_hardware
    from tuner.modeling.laws.forms import read_lr_law
    from tuner.modeling.laws.lr_at_batch import lr_at_batch
    from tuner.modeling.published_recipes import PUBLISHED

    seeds = json.loads((BENCH / "law_grid.json").read_text())["seeds"]
    proxy = dataclasses.replace(preset("debug"), mup_base_dim=preset("debug").dim)
    args, name = load_target("deepseek-v3-671b")
    target = FullRunTarget(model_args=args, name=name, hardware=get_hardware("h800"), gpus=2048,
                           tokens=int(14.8e12), seq_len=4096)
    no_deepseek = fit_prior([r for r in load_recipes() if r.family != "deepseek"])
    out = ["", "### The shipped law study's real fits at the full run", "",
           "Command: `python benchmarks/bench_law.py anchored`. Each seed's lr*(D, B) as "
           "benchmarks/law_grid.json stores it, read by the export itself (`build_full_run`: "
           "671B on 14.8T tokens, 2048 H800s, the batch it writes); hidden matrices' LRs "
           "(µP: lr / width_mult), like with like against a published single LR. Modeled.", "",
           "| seed | final batch (tokens) | the law alone: lr [95%], width | anchored: lr "
           "[95%], width | law's weight | V2-Lite / V2 / V3, DeepSeek rows out of the prior: "
           "anchored / published |", "|---|---|---|---|---|---|"]
    widths = []
    for seed, fit in sorted(seeds.items()):
        if not fit.get("lr_batch_law"):
            continue
        law = read_lr_law(fit["lr_batch_law"])
        full = build_full_run(Recipe(), proxy, target, proxy_tokens=524_288, law=law)
        a, at = full.answer, full.lr_at
        assert a is not None and at is not None and at.lr is not None
        m = a.width_mult
        widths.append(a.width)
        backs = []
        for key in ("deepseek-v3-16b", "deepseek-v3-236b", "deepseek-v3-671b"):
            pub = PUBLISHED[key]
            t_args, _ = load_target(key)
            t = dataclasses.replace(target, model_args=t_args, tokens=int(pub.tokens))
            point = dataclasses.replace(run_point(t_args, t), batch=pub.batch_tokens)
            mult = t_args.dim / proxy.mup_base_dim
            read = lr_at_batch(law, tokens=pub.tokens, batch=pub.batch_tokens,
                               flops_per_token=1.0, params=point.n_active)
            ans = answer_lr(point, prior=no_deepseek, law=read, width_mult=mult)
            backs.append(f"{ans.hidden_lr / pub.lr:.2f}x"
                         + ("" if ans.band[0] / mult <= pub.lr <= ans.band[1] / mult
                            else " (outside)"))
        llo, lhi = (v / m for v in at.band)
        out.append(f"| {seed} | {a.batch:,.0f} | {at.lr / m:.3g} [{llo:.3g}, {lhi:.3g}], "
                   f"{lhi / llo:.3g}x | {a.hidden_lr:.3g} [{a.band[0] / m:.3g}, "
                   f"{a.band[1] / m:.3g}], {a.width:.2f}x | {a.law_weight:.1%} | "
                   f"{' / '.join(backs)} |")
    out += ["", f"- **Target (the 671B export answers with a band <= 4x): "
                f"{'met' if widths and max(widths) <= 4 else 'not met'}** "
                f"(widths {', '.join(f'{w:.2f}x' for w in widths)}). The CPU law, 6.8-7.5 "
                "decades of tokens short, barely moves the prior (its weight in the column "
                "beside): the answer is published practice at this size and length, which is "
                "what a proxy this far below the run can honestly give; the held-out checks "
                "of these fits are unchanged (the law itself is not refitted here: RESULTS' "
                "grid section)."]
    return out


def run(args: argparse.Namespace) -> int:
    del args
    lines = _table_lines() + _law_lines()
    publish(HEADING, lines)
    return 0 if lines else 1
