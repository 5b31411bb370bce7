"""Reasons key so that trials failing the same way group, whatever their own numbers."""

import pytest

from reports.reasons import reason_kind


@pytest.mark.parametrize("reason, kind, detail", [
    ("constraint max_vio: 2.1 violates <= 2", "constraint max_vio", "2.1 violates <= 2"),
    ("pruned by ASHA at 77824 tokens", "pruned by ASHA at N tokens", "77824"),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad lr; 3",
     "ValueError", "bad lr; 3"),  # an exception's own "; " is not split
    ("diverged at step 12; constraint max_vio: 2.1 violates <= 2",
     "diverged at step N + constraint max_vio", "12; 2.1 violates <= 2"),
    ("constraint max_vio: 2.1 violates <= 2; constraint max_peak_memory_gb: 5 violates <= 4",
     "constraint max_vio + constraint max_peak_memory_gb", "2.1 violates <= 2; 5 violates <= 4"),
])
def test_reason_kind(reason, kind, detail):
    assert reason_kind(reason) == (kind, detail)


def test_trials_with_the_same_findings_share_a_key_whatever_their_numbers():
    a = "diverged at step 12; constraint max_vio: 2.1 violates <= 2"
    b = "diverged at step 40; constraint max_vio: 7 violates <= 2"
    assert reason_kind(a)[0] == reason_kind(b)[0]
    assert reason_kind(a)[0] != reason_kind("constraint max_vio: 7 violates <= 2")[0]
