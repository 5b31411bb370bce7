"""The band model's parts, fast: it fits the product's pooled law to its synthetic trials, the
band narrows with less scatter, and it reads the measured bands from the committed JSON."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import model_law_band as model  # noqa: E402


def test_the_band_narrows_with_less_scatter():
    tight, loose = model.band_widths(16, 0.02, 3), model.band_widths(16, 0.12, 3)
    assert all(w > 1 for w in tight + loose)
    assert max(tight) < min(loose)


def test_the_measured_bands_are_the_shipped_designs_seeds():
    bands = model.measured_bands()
    assert len(bands) >= 3 and all(1 < b < 10 for b in bands)
