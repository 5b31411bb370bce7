"""The floors of docs/architecture.md hold: no module imports from a floor above its own, and the
light commands start without the heavy libraries."""

from __future__ import annotations

import ast
import importlib
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


MAX_MODULES = 12  # modules in one folder (its __init__ not counted): split a bigger one by concept


def rooms(importer: str, target: str, packages: set[str]) -> tuple[str, str] | None:
    """The rooms of two modules inside their nearest common package: the sub-package each lies
    in, or ``"P (own modules)"`` for a module directly in that package P. None when they share
    no package below the top level (the top-level packages are ordered by the floor table)."""
    a, b = importer.split("."), target.split(".")
    i = 0
    while i < min(len(a), len(b)) - 1 and a[i] == b[i]:
        i += 1
    if i == 0:
        return None
    parent = ".".join(a[:i])

    def room(parts: list[str]) -> str:
        child = ".".join(parts[:i + 1])
        return child if child in packages else f"{parent} (own modules)"

    ra, rb = room(a), room(b)
    return None if ra == rb else (ra, rb)


def two_way_pairs(imports: dict[str, list[str]], packages: set[str]) -> list[str]:
    edges: dict[tuple[str, str], list[str]] = {}
    for importer, targets in imports.items():
        for target in targets:
            pair = rooms(importer, target, packages)
            if pair:
                edges.setdefault(pair, []).append(f"{importer} -> {target}")
    return [f"{a} <-> {b}: {edges[a, b][0]}; {edges[b, a][0]}"
            for a, b in sorted(edges) if a < b and (b, a) in edges]


def test_no_two_rooms_import_each_other():
    """Inside every package, its sub-packages and its own modules are ordered: if one imports
    from another, the other imports nothing from it (the floor table orders the rooms)."""
    known = modules()
    packages = {m for m, p in known.items() if p.name == "__init__.py"}
    imports: dict[str, list[str]] = {}
    for module, path in known.items():
        for _, target in project_imports(path):
            if target not in known and target.rsplit(".", 1)[0] in known:
                target = target.rsplit(".", 1)[0]
            if target in known:
                imports.setdefault(module, []).append(target)
    pairs = two_way_pairs(imports, packages)
    assert not pairs, "rooms that import each other:\n" + "\n".join(pairs)
    # the check itself: two sibling rooms importing each other, and a package's own modules
    # and its sub-package, are both reported
    fake = {"p.a.x": ["p.b.y"], "p.b.y": ["p.a.z"], "p.m": ["p.c.w"], "p.c.w": ["p.m"]}
    assert len(two_way_pairs(fake, {"p", "p.a", "p.b", "p.c"})) == 2


def test_no_folder_holds_more_than_twelve_modules():
    folders = {path.parent for path in modules().values()}
    big = {str(f.relative_to(ROOT)): n for f in sorted(folders)
           if (n := sum(p.name != "__init__.py" for p in f.glob("*.py"))) > MAX_MODULES}
    assert not big, f"folders over {MAX_MODULES} modules (split them by concept): {big}"


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
    """`trainers.config.validation` holds the project's one rule check (`require`) and one
    unknown-key check (`reject_unknown`): no other module defines (or binds) a helper of those
    names."""
    names = {"require", "_require", "reject_unknown", "_reject_unknown"}
    home = ROOT / "trainers" / "config" / "validation.py"

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
    assert not copies, ("use trainers.config.validation's require/reject_unknown:\n"
                        + "\n".join(copies))
    assert {n for _, n in helpers(home)} == {"require", "reject_unknown"}
    # the scan itself: a module-level copy, a nested one and a bound alias are all reported
    fake = tmp_path / "m.py"
    fake.write_text("def _require(ok, where, rule, value):\n    pass\n\n"
                    "class C:\n    def f(self):\n        def _reject_unknown(t, v, w):\n"
                    "            pass\n\n"
                    "require = print\n")
    assert sorted(helpers(fake)) == [(1, "_require"), (6, "_reject_unknown"), (9, "require")]


# -- the import graph: no cycle, function-local imports only for a reason, Ray ⇄ Optuna -----

# Libraries a light command or a Ray worker must not load before it needs them: the one reason
# an import of a project module may sit inside a function (docs/architecture.md, "Imports").
DEFERRED = (*HEAVY, "optuna", "tokenizers", "pyarrow", "fastapi", "uvicorn")
# The one module that imports both Ray and Optuna: the Ray Tune ⇄ Optuna searcher.
RAY_AND_OPTUNA = "tuner.study.trial.searcher"


def lazy_exports(package: str) -> dict[str, str]:
    """``{name: module}`` a package imports on first use (its ``_EXPORTS``; the packages that
    have one import only the standard library, so importing it here is cheap)."""
    if not (ROOT / package.replace(".", "/") / "__init__.py").is_file():
        return {}
    return dict(getattr(importlib.import_module(package), "_EXPORTS", {}))


def imports_of(path: Path) -> list[tuple[int, str, bool, bool]]:
    """(line, imported name, inside a function, under TYPE_CHECKING) for every import of
    ``path``: project modules as module names (``from pkg import sub`` names ``pkg.sub``),
    other libraries by their top-level name."""
    known = modules()
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[int, str, bool, bool]] = []

    def visit(node: ast.AST, local: bool, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            guarded = typing_only or (isinstance(child, ast.If)
                                      and "TYPE_CHECKING" in ast.unparse(child.test))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                lazy = lazy_exports(child.module) if child.module in known else {}
                for a in child.names:
                    sub = f"{child.module}.{a.name}"
                    # a submodule; a name the package imports on first use; else the package
                    names.append(sub if sub in known else lazy.get(a.name, child.module))
            for name in names:
                if name.split(".")[0] in PACKAGES:
                    while name not in known and "." in name:
                        name = name.rsplit(".", 1)[0]
                    if name not in known:
                        continue
                else:
                    name = name.split(".")[0]
                out.append((child.lineno, name, local, guarded))
            visit(child, inner, guarded)

    visit(tree, False, False)
    return out


def graph() -> dict[str, list[tuple[int, str, bool, bool]]]:
    return {m: imports_of(p) for m, p in modules().items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    """Every import counts: top level, inside functions, under TYPE_CHECKING."""
    g = graph()
    edges = {m: {t for _, t, _, _ in imps if t in g and t != m} for m, imps in g.items()}
    assert cycles(edges) == [], "import cycles (every import counted):\n" + "\n".join(
        " -> ".join(c) for c in cycles(edges))


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def loaded_at_import(g: dict[str, list[tuple[int, str, bool, bool]]]) -> dict[str, set[str]]:
    """For each module, the libraries importing it loads (its top-level imports, followed
    through the project's modules; TYPE_CHECKING imports do not run)."""
    memo: dict[str, set[str]] = {}

    def libs(m: str, seen: frozenset[str]) -> set[str]:
        if m in memo:
            return memo[m]
        out: set[str] = set()
        parts = m.split(".")
        for i in range(1, len(parts)):  # importing a.b.c runs a/__init__ and a/b/__init__
            parent = ".".join(parts[:i])
            if parent in g and parent not in seen:
                out |= libs(parent, seen | {m})
        for _, t, local, typing_only in g.get(m, []):
            if local or typing_only:
                continue
            if t in g:
                if t not in seen:
                    out |= libs(t, seen | {m})
            else:
                out.add(t)
        memo[m] = out
        return out

    return {m: libs(m, frozenset()) for m in g}


def deferral_reason(importer: str, target: str, loaded: dict[str, set[str]]) -> list[str]:
    """The `DEFERRED` libraries ``target`` loads that ``importer`` does not: the reason an
    import of ``target`` may sit inside a function of ``importer`` (empty: no reason)."""
    return sorted(set(DEFERRED) & (loaded[target] - loaded[importer]))


def test_function_local_imports_only_defer_a_heavy_library():
    """A project module imported inside a function must bring a library its importer does not
    load (torch, Ray, pandas, plotly, matplotlib, Optuna, tokenizers, pyarrow, FastAPI,
    uvicorn): `--help` and `list` stay light, a Ray worker loads no Optuna. Any other such
    import belongs at the top of the module, where a reader and the cycle check see it."""
    g = graph()
    loaded = loaded_at_import(g)
    bad = [f"{modules()[m].relative_to(ROOT)}:{line}: imports {t} inside a function, but "
           f"{t} loads no library {m} does not already load"
           for m, imps in sorted(g.items()) for line, t, local, _ in imps
           if local and t in g and t != m and not deferral_reason(m, t, loaded)]
    assert not bad, "\n".join(bad)


def test_the_deferral_check_tells_a_reason_from_none():
    g = graph()
    loaded = loaded_at_import(g)
    # the CLI's handlers start Ray only when a study runs
    assert "ray" in deferral_reason("tuner.app.commands", "tuner.study.run.runner", loaded)
    # the storage module brings nothing the runner lacks: no reason to import it late
    assert deferral_reason("tuner.study.run.runner", "tuner.study.store.storage", loaded) == []


def test_only_the_searcher_imports_both_ray_and_optuna():
    both = sorted(m for m, imps in graph().items()
                  if {"ray", "optuna"} <= {t for _, t, _, _ in imps})
    assert both == [RAY_AND_OPTUNA], f"modules importing both Ray and Optuna: {both}"
