"""Reasons key so that trials failing the same way group, whatever their own numbers; a schema-1
study's text reasons read back as the typed reasons a schema-2 study stores."""

import pytest

from tuner.study.results.reasons import Reason, group_of, join_text, parse_reason_text


def reason_kind(text: str) -> tuple[str, str]:
    """The group of a reason stored as text only (schema 1)."""
    return group_of(parse_reason_text(text))


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


@pytest.mark.parametrize("reasons", [
    (Reason(kind="diverged", detail="12"),
     Reason(kind="constraint", subject="max_vio", detail="2.1 violates <= 2")),
    (Reason(kind="pruned", detail="77824"),),
    (Reason(kind="out_of_memory", detail="CUDA out of memory. Tried to allocate 2.00 GiB"),),
    (Reason(kind="interrupted"),),
    (Reason(kind="non_finite"), Reason(kind="constraint", subject="min_tokens_per_s",
                                        detail="12 violates >= 1e+04")),
])
def test_typed_reasons_survive_the_text_round_trip(reasons):
    """What a schema-1 study stored as text parses back to the reasons that wrote it."""
    assert parse_reason_text(join_text(reasons)) == reasons
