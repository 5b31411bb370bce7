"""The floors of docs/architecture.md hold: no module imports from a floor above its own, and the
light commands start without the heavy libraries."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainers", "search_spaces", "tuner", "reports")
HEAVY = ("torch", "ray", "pandas", "plotly", "matplotlib")


def floor_table() -> dict[str, float]:
    """``{package: floor}`` from the table under "## Floors" in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Floors", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*([\d.]+)\s*\|\s*`([\w.]+)`\s*\|", section, flags=re.M)
    assert rows, "docs/architecture.md: no floor table under '## Floors'"
    return {package: float(floor) for floor, package in rows}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def floor_of(module: str, table: dict[str, float]) -> float | None:
    """The floor of the longest table row that is ``module`` or a package above it."""
    best = None
    for package, floor in table.items():
        if module == package or module.startswith(package + "."):
            if best is None or len(package) > len(best[0]):
                best = (package, floor)
    return best[1] if best else None


def project_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a project module, at any depth: top level, inside
    functions, under TYPE_CHECKING, and ``importlib.import_module("literal")``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        found += [(node.lineno, n) for n in names if n.split(".")[0] in PACKAGES]
    return found


def test_every_module_has_a_floor():
    table = floor_table()
    loose = sorted(m for m in modules() if m != "tuner" and floor_of(m, table) is None)
    assert not loose, f"modules with no row in docs/architecture.md's floor table: {loose}"


def test_the_tuner_namespace_imports_nothing():
    assert project_imports(ROOT / "tuner" / "__init__.py") == []


def test_no_module_imports_from_a_higher_floor():
    table = floor_table()
    known = modules()
    bad = []
    for module, path in sorted(known.items()):
        own = floor_of(module, table)
        if own is None:
            continue
        for line, target in project_imports(path):
            # "from pkg import name" lists pkg.name too: judge a real module, else its package
            if target not in known and target.rsplit(".", 1)[0] in known:
                target = target.rsplit(".", 1)[0]
            theirs = floor_of(target, table)
            if theirs is not None and theirs > own:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module} (floor {own:g}) imports "
                           f"{target} (floor {theirs:g})")
    assert not bad, "imports from a higher floor:\n" + "\n".join(bad)


def test_the_table_catches_an_upward_import(tmp_path):
    """The checker itself: a core module importing the exporter is reported."""
    table = floor_table()
    fake = tmp_path / "m.py"
    fake.write_text("def f():\n    from tuner.export.pick import Pick\n")
    (line, target), = [i for i in project_imports(fake) if i[1] == "tuner.export.pick"]
    assert line == 2 and floor_of(target, table) > floor_of("tuner.study.specs.spec", table)


@pytest.mark.parametrize("argv", [["--help"], ["list", "--root", "{tmp}"]])
def test_light_commands_import_no_heavy_library(argv, tmp_path):
    """Run the CLI with torch, Ray, pandas, plotly and matplotlib made unimportable."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = ("import sys\n"
            f"for name in {HEAVY!r}:\n"
            "    sys.modules[name] = None  # any import of it raises ImportError\n"
            "from tuner.app.cli import main\n"
            f"sys.exit(main({argv!r}))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if argv == ["--help"]:
        assert "submit" in proc.stdout and "export" in proc.stdout


def test_one_require_and_one_unknown_key_check(tmp_path):
    """`trainers.validation` holds the project's one rule check (`require`) and one unknown-key
    check (`reject_unknown`): no other module defines (or binds) a helper of those names."""
    names = {"require", "_require", "reject_unknown", "_reject_unknown"}
    home = ROOT / "trainers" / "validation.py"

    def helpers(path: Path) -> list[tuple[int, str]]:
        found = []
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                bound = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                bound = [t.id for t in targets if isinstance(t, ast.Name)]
            else:
                continue
            found += [(node.lineno, n) for n in bound if n in names]
        return found

    copies = [f"{path.relative_to(ROOT)}:{line}: {name}"
              for path in modules().values() if path != home
              for line, name in helpers(path)]
    assert not copies, "use trainers.validation's require/reject_unknown:\n" + "\n".join(copies)
    assert {n for _, n in helpers(home)} == {"require", "reject_unknown"}
    # the scan itself: a module-level copy, a nested one and a bound alias are all reported
    fake = tmp_path / "m.py"
    fake.write_text("def _require(ok, where, rule, value):\n    pass\n\n"
                    "class C:\n    def f(self):\n        def _reject_unknown(t, v, w):\n"
                    "            pass\n\n"
                    "require = print\n")
    assert sorted(helpers(fake)) == [(1, "_require"), (6, "_reject_unknown"), (9, "require")]
