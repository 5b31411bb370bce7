"""A law study's LR against DeepSeek's published recipes, each at its own tokens and final batch.

For each target of `tuner.modeling.published_recipes` (DeepSeek-V2-Lite 15.7B: 5.7T tokens,
4,608 x 4,096, 4.2e-4, arXiv:2405.04434 appendix B; DeepSeek-V2 236B: 8.1T, 9,216 x 4,096,
2.4e-4, §3.1.2; DeepSeek-V3 671B: 14.8T, 15,360 x 4,096, 2.2e-4, arXiv:2412.19437 §4.2),
`backtest` asks the law for its LR at that run's tokens and final batch through the export's own
hook (`tuner.modeling.laws.lr_at_batch`), so a row is what ``moetune export --target T --tokens
<published> --global-batch <published>`` writes. Like with like: a published LR is one LR for
every parameter in standard parametrization, so under µP the row sets it against the LR the
target's hidden matrices get (lr / width_mult), nearly every parameter. A law that refuses its LR
at that batch (fitted at one batch) gives none; its LR at the batch it was fitted at is shown
beside it, labelled, never in its place.

    >>> rows = backtest(law, proxy=proxy_args, batches=LawBatches.of([256.0]))  # doctest: +SKIP
    >>> print(backtest_table(rows))                                             # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from trainers.config.model_args import ModelArgs
from tuner.modeling.anchor.answer import answer_lr
from tuner.modeling.anchor.prior import Prior, fit_prior
from tuner.modeling.anchor.recipe_table import load_recipes
from tuner.modeling.cost_model import count_params, non_embedding_flops_per_token
from tuner.modeling.full_run import FullRunTarget, run_point
from tuner.modeling.hardware import get_hardware
from tuner.modeling.laws.interface import LrLaw
from tuner.modeling.laws.lr_at_batch import LawBatches, lr_at_batch
from tuner.modeling.laws.power_law import StudyLaw
from tuner.modeling.published_recipes import PUBLISHED, PublishedRecipe
from tuner.modeling.targets import published_target


def backtest(law: StudyLaw | LrLaw, *, proxy: ModelArgs,
             batches: LawBatches | None = None) -> list[dict[str, Any]]:
    """One row per published DeepSeek recipe (module docstring); ``proxy``: the study's proxy
    (its µP base width sets width_mult), ``batches``: where a law in D alone was fitted."""
    rows = []
    for name, pub in sorted(PUBLISHED.items(), key=lambda kv: kv[1].tokens):  # V2-Lite first
        args, _ = published_target(name)
        if proxy.mup_base_dim:
            args = dataclasses.replace(args, mup_base_dim=proxy.mup_base_dim)
        mult = args.dim / proxy.mup_base_dim if proxy.mup_base_dim else 1.0
        c = count_params(args)
        at = lr_at_batch(law, tokens=pub.tokens, batch=pub.batch_tokens, batches=batches,
                         flops_per_token=non_embedding_flops_per_token(args, pub.seq_len),
                         params=float(c.active - c.embedding - c.head))
        hidden = at.lr / mult if at.lr is not None else None
        point = dataclasses.replace(run_point(args, _run(args, name, pub)),
                                    batch=pub.batch_tokens)
        ans = answer_lr(point, prior=_without_deepseek(), law=at, width_mult=mult)
        lo, hi = (v / mult for v in ans.band)
        rows.append({
            "anchored": {"hidden_lr": ans.hidden_lr, "ratio": ans.hidden_lr / pub.lr,
                         "band": [lo, hi], "covered": lo <= pub.lr <= hi,
                         "law_weight": ans.law_weight},
            "target": name, "recipe": pub.name, "source": pub.source, "tokens": pub.tokens,
            "batch": f"{pub.batch_end} x {pub.seq_len}", "batch_tokens": pub.batch_tokens,
            "published_lr": pub.lr, "width_mult": mult, "lr": at.lr, "hidden_lr": hidden,
            "ratio": hidden / pub.lr if hidden is not None else None,
            "band": [at.band[0] / mult, at.band[1] / mult] if at.lr is not None else None,
            "decades_past_tokens": at.decades_tokens, "decades_past_batch": at.decades_batch,
            "refusal": at.refusal, "valid_at_batch": at.valid_at_batch,
            "interaction": at.interaction if at.lr is not None else None,
            "hidden_lr_at_fitted_batch": at.law_lr / mult,
            "ratio_at_fitted_batch": at.law_lr / mult / pub.lr})
    return rows


@functools.lru_cache(maxsize=1)
def _without_deepseek() -> Prior:
    """The prior with every DeepSeek row left out: nothing DeepSeek published enters an answer
    held against DeepSeek's own runs."""
    return fit_prior([r for r in load_recipes() if r.family != "deepseek"])


def _run(args: ModelArgs, name: str, pub: PublishedRecipe) -> FullRunTarget:
    """The published run as a full-run target (its tokens and sequence length; the hardware
    does not enter the LR)."""
    return FullRunTarget(model_args=args, name=name, hardware=get_hardware("h800"), gpus=2048,
                         tokens=int(pub.tokens), seq_len=pub.seq_len)


def _times(ratio: float) -> str:
    """A ratio as a factor: ``2.1x`` or ``1/550x``."""
    inv = 1 / ratio
    return f"{ratio:.2g}x" if ratio >= 1 else f"1/{inv:.2g}x" if inv < 100 else f"1/{inv:,.0f}x"


def backtest_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table: the LR compared is the hidden matrices' (µP) or the one
    LR (standard parametrization); a refused row shows the law's LR at its fitted batch, marked
    as measured there."""
    out = ["| target | tokens | final batch | published lr | study's lr (hidden matrices) | "
           "ratio | band | decades past in D / B | D x B term's share | anchored, DeepSeek rows "
           "out of the prior: lr [95%], ratio |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["lr"] is not None:
            lr, ratio = f"{r['hidden_lr']:.3g}", _times(r["ratio"])
            band = f"[{r['band'][0]:.3g}, {r['band'][1]:.3g}]"
        else:
            lr = (f"refused (at its fitted batch of {r['valid_at_batch']:.4g} tokens: "
                  f"{r['hidden_lr_at_fitted_batch']:.3g})" if r["valid_at_batch"] else "refused")
            ratio, band = f"({_times(r['ratio_at_fitted_batch'])} at the fitted batch)", "-"
        out.append(f"| {r['recipe']} ({r['target']}) | {r['tokens']:.3g} | {r['batch']} | "
                   f"{r['published_lr']:.2g} | {lr} | {ratio} | {band} | "
                   f"{r['decades_past_tokens']:.1f} / {r['decades_past_batch']:.1f} | "
                   f"{_term(r.get('interaction'))} | {_anchored(r.get('anchored'))} |")
    return "\n".join(out)


def _anchored(a: dict[str, Any] | None) -> str:
    if not a:
        return "-"
    return (f"{a['hidden_lr']:.3g} [{a['band'][0]:.3g}, {a['band'][1]:.3g}], "
            f"{_times(a['ratio'])}{'' if a['covered'] else ' (outside)'}")


def _term(info: dict[str, Any] | None) -> str:
    """The D x B term's decades of a row's log10 lr, and whether the cells resolve it."""
    if not info:
        return "-"
    if info["left_out"]:
        return (f"left out (|t| = {abs(info['t']):.1f}, not resolved); kept: "
                f"{info['decades_if_kept']:+.2f} decades")
    return (f"{info['decades']:+.2f} decades (|t| = {abs(info['t']):.1f}, "
            f"{'resolved' if info['resolved'] else 'not resolved'})")


def backtest_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row, for stderr."""
    out = []
    for r in rows:
        head = (f"backtest {r['recipe']} at its {r['tokens']:.3g} tokens and {r['batch']} "
                f"tokens per step (published lr {r['published_lr']:.2g}): ")
        a = r.get("anchored")
        if a:
            head += (f"the anchored answer with every DeepSeek row out of the prior gives "
                     f"{a['hidden_lr']:.3g} for the hidden matrices, {_times(a['ratio'])} "
                     f"published, {'inside' if a['covered'] else 'OUTSIDE'} its band "
                     f"({a['band'][0]:.3g}-{a['band'][1]:.3g}); ")
        if r["lr"] is not None:
            term = r.get("interaction")
            out.append(head + f"the study's law gives {r['hidden_lr']:.3g} for the hidden "
                       f"matrices, {_times(r['ratio'])} published (band {r['band'][0]:.3g}-"
                       f"{r['band'][1]:.3g})"
                       + (f"; its D x B term: {_term(term)}" if term else "")
                       + ".")
        else:
            where = (f"measured at {r['valid_at_batch']:.4g} tokens per step, not there"
                     if r["valid_at_batch"] else "measured at no batch it can name")
            out.append(head + f"refused (the law did not measure lr* at this batch); where it "
                       f"did it gives {r['hidden_lr_at_fitted_batch']:.3g} for the hidden "
                       f"matrices, {_times(r['ratio_at_fitted_batch'])} published, {where}.")
    return out
