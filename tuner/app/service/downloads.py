"""What the service hands back as files: a study's report.html, built again only when the study
changed since its last build, and an export's download (the files ``moetune export --out``
writes, one zip when there are several)."""

from __future__ import annotations

import io
import json
import threading
import zipfile
from pathlib import Path, PurePath

import optuna

from tuner.app.requests import actions
from tuner.app.requests.actions import ExportRequest
from tuner.export import formats

REPORT_KEY = ".built-for"  # in a report folder: what the report there was built from

Download = tuple[bytes, str, str, list[str]]  # body, file name, media type, stderr lines


class Reports:
    """Reports built on demand, one build at a time per study: requests arriving together wait
    for the same build."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}

    def html(self, study: optuna.Study, out: Path) -> Path:
        """``out/report.html`` of ``study``, built again only when the study changed since the
        build there (its trials, their states, its attributes: `report_key`)."""
        import reports

        with self._locks.setdefault(study.study_name, threading.Lock()):
            key = report_key(study)
            built = out / REPORT_KEY
            if built.is_file() and built.read_text() == key and (out / "report.html").is_file():
                return out / "report.html"
            paths = reports.build(study, out)
            built.write_text(key)
            return Path(paths["report_html"])


def report_key(study: optuna.Study) -> str:
    """What a report is built from, in short: every trial's number, state and end time, and the
    study's attributes (the service's record, the measured noise)."""
    trials = [(t.number, t.state.name, str(t.datetime_complete or ""))
              for t in study.get_trials(deepcopy=False)]
    return json.dumps([trials, study.user_attrs], sort_keys=True, default=str)


def export_download(study: optuna.Study, request: ExportRequest, *, run_dir: Path,
                    storage: str, recipes: Path | None = None) -> Download:
    """Every file ``moetune export --out`` writes for ``request`` (`actions.export`), named
    after the study and the format (`formats.file_name`): one zip when there are several (a
    model config and its sidecar), else the launch config itself; with what the local export
    says on stderr (`actions.Exported.messages`). ``recipes``: the operator's team recipes
    (``serve --recipes``), read first by the prior as the local export's ``--recipes``.

    Raises:
        actions.RequestError: the export refuses a value, naming its flag.
    """
    file = formats.file_name(request.format, f"{study.study_name}-{request.format}")
    done = actions.export(study, request, run_dir=run_dir, storage=storage, file=file,
                          recipes=recipes)
    said = done.messages(request.format)
    if len(done.files) == 1:
        return done.text.encode(), file, "text/plain", said
    return zip_files(done.files), f"{PurePath(file).stem}.zip", "application/zip", said


def zip_files(files: dict[str, str]) -> bytes:
    """The files as one zip archive, in their order, the same bytes for the same files (every
    entry dated 1980-01-01, zip's earliest date)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), text,
                             compress_type=zipfile.ZIP_DEFLATED)
    return buffer.getvalue()
