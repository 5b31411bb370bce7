"""The submit action, typed: `SubmitRequest` holds what a submit sends (the spec's TOML text, a
name that overrides its ``[study] name``, the space file it names when the receiver cannot read
the sender's files, whether to continue a study of that name), checked when it is made; a bad
value raises `RequestError`, whose ``field`` names it.

The command line builds it from its flags (``from_namespace``), the service from the API's JSON
body or the page's form (``from_body``), and ``moetune submit --server`` sends it as that body
(``body``), so neither front end goes through the other's parser. `submitted_spec` turns a
request into the one parsed spec, the same way for both: the TOML read under the same limits,
the space sent along put in, the name put in, then the spec's own rules. What a submit does
next is each front end's own, as the two differ in kind: the command line checks the spec's
files, prepares the study and runs it in its own process (`tuner.study.run.preflight.prepare`);
a service checks its own rules, queues the study and lets its driver run it
(`tuner.app.service.context.Service.submit`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.app.requests.actions import RequestError
from tuner.study.specs.spec import SpecError, StudySpec, parse_spec
from tuner.study.specs.spec import read_toml as read_spec_toml


@dataclass(frozen=True, kw_only=True)
class SubmitRequest:
    """Submit the study ``spec`` declares."""

    spec: str  # the spec, TOML text
    name: str | None = None  # overrides the spec's [study] name
    space: str | None = None  # the TOML of the space file the spec names, sent along
    resume: bool = False  # continue the study if it exists (the command line's --resume)
    # the spec file's folder, the base of its relative paths; None: the receiver reads no file
    # of the sender's (a service)
    base_dir: Path | None = None
    origin: str = "spec"  # what messages call the spec text: its file's path, or "spec"

    def __post_init__(self) -> None:
        if not isinstance(self.spec, str):
            raise RequestError(f"spec: must be a study spec's TOML text, but got "
                               f"{type(self.spec).__name__}.", field="spec")
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            raise RequestError(f"--name: must be a study name (letters, digits, _ . -), but got "
                               f"{self.name!r}; omit it to use the spec's [study] name.",
                               field="--name")
        if self.space is not None and not isinstance(self.space, str):
            raise RequestError(f"space: must be a search space's TOML text, but got "
                               f"{type(self.space).__name__}.", field="space")
        if not isinstance(self.resume, bool):
            raise RequestError(f"--resume: must be true or false, but got {self.resume!r}.",
                               field="--resume")

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> SubmitRequest:
        """From ``moetune submit``'s parsed flags: the spec file read here."""
        path = Path(args.spec)
        if not path.is_file():
            raise RequestError(f"spec: must be an existing file, but got {str(path)!r}.",
                               field="spec")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise RequestError(f"{path}: cannot be read as text ({e}).", field="spec") from None
        return cls(spec=text, name=args.name, resume=bool(args.resume),
                   base_dir=path.resolve().parent, origin=str(path))

    @classmethod
    def from_body(cls, spec: Any, *, name: Any = None, space: Any = None) -> SubmitRequest:
        """From the API's JSON body or the page's form (no file of the client's is read)."""
        return cls(spec=spec, name=name, space=space)

    def body(self) -> dict[str, Any]:
        """The request as the service's JSON body: a space file the spec names beside it is
        sent along (the service reads no client file)."""
        out: dict[str, Any] = {"spec": self.spec, "name": self.name}
        if self.space is not None:
            out["space"] = self.space
        elif self.base_dir is not None:
            space = read_toml(self.spec, "spec", origin=self.origin).get("space")
            if isinstance(space, dict) and isinstance(space.get("file"), str):
                local = self.base_dir / space["file"]
                if local.is_file():
                    out["space"] = local.read_text()
        return out


def read_toml(text: str, field: str, *, origin: str | None = None,
              max_bytes: int | None = None) -> dict[str, Any]:
    """`tuner.study.specs.spec.read_toml` (the one TOML reader of a spec), its error a
    request's."""
    try:
        return read_spec_toml(text, field, origin=origin, max_bytes=max_bytes)
    except SpecError as e:
        raise RequestError(str(e), field=e.field) from None


def submitted_spec(request: SubmitRequest, *, max_bytes: int | None = None,
                   check_table: Callable[[dict[str, Any]], None] | None = None) -> StudySpec:
    """The spec ``request`` submits, parsed once: its TOML (and the space sent along) under
    ``max_bytes``, the name put in, ``check_table`` (a front end's own rules on the table, e.g.
    a service's), then `parse_spec`. No file of the spec's is read but a ``[space] file``
    beside it (the input check, `check_inputs`, is the caller's: it runs where the study runs).

    Raises:
        RequestError: naming the field, the rule and the value.
    """
    table = read_toml(request.spec, "spec", origin=request.origin, max_bytes=max_bytes)
    if request.space is not None:
        table["space"] = read_toml(request.space, "space", max_bytes=max_bytes)
    if request.name is not None:
        study = table.setdefault("study", {})
        if isinstance(study, dict):  # else not a table: the parse says so
            study["name"] = request.name
    if check_table is not None:
        check_table(table)
    try:
        return parse_spec(table, base_dir=request.base_dir)
    except SpecError as e:
        raise RequestError(str(e), field=e.field) from None
