"""Reports: a study in Optuna storage → ranked.md, report.html, PNGs and trials.csv/.parquet.

Example:
    >>> import optuna, reports
    >>> study = optuna.load_study(study_name="s1", storage="sqlite:///moetune.db")
    >>> reports.build(study, "out/s1")["report_html"]
"""

from __future__ import annotations

from reports.analysis.frame import trials_frame
from reports.analysis.hypervolume import hypervolume
from reports.analysis.snapshot import Snapshot, take_snapshot
from reports.build import build, write_report
from reports.compare import compare
from reports.ranked import top_table
from tuner.study.results.ranking import crowding_distance, nondominated_ranks

__all__ = ["Snapshot", "build", "compare", "crowding_distance", "hypervolume",
           "nondominated_ranks", "take_snapshot", "top_table", "trials_frame", "write_report"]
