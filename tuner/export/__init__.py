"""The exporter (floor 4): pick a study's trial, scale it to the full run, render launch configs.

    >>> full, picked = export_study(study, Pick(kind="knee"), target)  # doctest: +SKIP
    >>> print(formats.render("megatron", full))                        # doctest: +SKIP
"""

from __future__ import annotations

from tuner.export import formats
from tuner.export.export import export_study
from tuner.export.pick import PICKS, Pick, Picked, pick_trial

__all__ = ["PICKS", "Pick", "Picked", "export_study", "formats", "pick_trial"]
