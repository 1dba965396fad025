"""The layers of lit_rlvr (docs/architecture.md, "Layers"): no import runs from a lower layer up.

Two checks of one map (``LAYERS``), plus the lab's edge: nothing in lit_rlvr but the benchmark
package itself imports ``lit_rlvr.bench`` or the top-level ``benchmarks/`` scripts, and the
subcommands ``lit-rlvr`` dispatches by name (``user_tools.SUBCOMMANDS``, imported by ``importlib``,
which the static check cannot see) are product modules that load no benchmark code either.

* static: every import statement in every file of ``lit_rlvr/`` (top level, inside a function,
  under ``TYPE_CHECKING``) names a module of the same or a lower layer;
* at run time: importing a representative module of each layer in a fresh interpreter (a fork of one
  that imported only the third-party packages, ``modules_loaded_by``) loads
  no module of a higher layer (so ``lit_rlvr.rollout.loop`` and ``lit_rlvr.module`` load no
  selection method, and the contract loads neither the rollout loop nor the module).

Within the methods' layer, no method's file imports another method's file: what two methods
share lives in the selector toolkit (``lit_rlvr.selection_toolkit``) or in a helper module of
``lit_rlvr/callbacks/`` that exports no method.

A new module must be placed in ``LAYERS`` (and in the docs' table) before this test passes.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS: dict[str, int] = {
    # 0. records and contract: what every stage passes and the selection contract.
    "lit_rlvr.types": 0,
    "lit_rlvr.advantages": 0,
    "lit_rlvr.zero_variance": 0,  # the zero-variance rule, torch-free
    "lit_rlvr.selection": 0,
    "lit_rlvr.selection_host": 0,
    "lit_rlvr.selection_toolkit": 0,
    # 1. building blocks: pure functions and infrastructure that know no step.
    "lit_rlvr.prompts": 1,
    "lit_rlvr.rewards": 1,
    "lit_rlvr.losses": 1,
    "lit_rlvr.collate": 1,
    "lit_rlvr.accounting": 1,
    "lit_rlvr.settings": 1,
    "lit_rlvr.policy": 1,
    "lit_rlvr.sharding": 1,
    "lit_rlvr.run.checkpoint_files": 1,
    "lit_rlvr.run.checkpointing": 1,
    "lit_rlvr.run.step_files": 1,
    "lit_rlvr.run.sharded_checkpoints": 1,
    "lit_rlvr.run.preemption": 1,
    "lit_rlvr.guards": 1,
    "lit_rlvr.data": 1,
    "lit_rlvr.run.console": 1,
    "lit_rlvr.report.plot": 1,
    "lit_rlvr.run.paths": 1,
    "lit_rlvr.report.group_file": 1,  # groups.csv's columns and reader, torch-free
    "lit_rlvr.run.loggers": 1,
    "lit_rlvr.voting": 1,
    "lit_rlvr.report.curves": 1,
    "lit_rlvr.seeds": 1,
    "lit_rlvr.critical_batch": 1,  # the batch rule: pure arithmetic
    "lit_rlvr.report": 1,  # the report wing's package file (imports nothing); its modules are placed one by one
    "lit_rlvr.run": 1,  # the run wing's package file (imports nothing)
    "lit_rlvr.critical_batch.calibrate": 5,  # `lit-rlvr calibrate`: runs fits
    # 2. rollout: engines and the rollout loop (stages 2-3b).
    "lit_rlvr.rollout": 2,
    # 3. trainers: the LightningModules, the update, and what runs beside them.
    "lit_rlvr.policy_module": 3,
    "lit_rlvr.module": 3,
    "lit_rlvr.update": 3,
    "lit_rlvr.dpo": 3,
    "lit_rlvr.g2d": 3,
    "lit_rlvr.report.group_records": 3,
    # 4. methods: the selection callbacks.
    "lit_rlvr.callbacks": 4,
    # 5. applications: the command line, its user tools and the reports.
    "lit_rlvr": 5,  # the package's __init__ (only a version string)
    "lit_rlvr.run.cli": 5,
    "lit_rlvr.run.runs": 5,
    "lit_rlvr.run.resumes": 5,
    "lit_rlvr.run.config_checks": 5,
    "lit_rlvr.report.selection_report": 5,
    "lit_rlvr.report.report_page": 5,
    "lit_rlvr.report.report_figure": 5,
    "lit_rlvr.report.lever_report": 5,
    "lit_rlvr.report.advice": 5,
    "lit_rlvr.run.launch": 5,  # the console script: stdlib only until a Trainer command
    "lit_rlvr.run.user_tools": 5,  # SUBCOMMANDS, stdlib only
    "lit_rlvr.run.cli_help": 5,
    "lit_rlvr.run.cli_errors": 5,
    "lit_rlvr.run.progress_log": 1,
    "lit_rlvr.run.threads": 5,
    "lit_rlvr.report.summary": 5,
    "lit_rlvr.arrol_vote": 5,
    "lit_rlvr.oc_fixed_harvest": 5,
    "lit_rlvr.probe": 5,
    "lit_rlvr.run.fit_config": 5,
    "lit_rlvr.g2d.pipeline": 5,
    # 6. the lab: benchmarks (and the benchmarks/ scripts, outside the package). It may import the
    # product; nothing in the product imports it.
    "lit_rlvr.bench": 6,
}
"""Module or package name -> layer; the longest matching prefix decides."""

NAMES = ["records and contract", "building blocks", "rollout", "trainers", "methods", "applications", "lab"]
LAB = 6

REPRESENTATIVES: dict[int, list[str]] = {
    0: ["lit_rlvr.types", "lit_rlvr.selection"],
    1: ["lit_rlvr.prompts", "lit_rlvr.data.lengths", "lit_rlvr.rewards", "lit_rlvr.collate", "lit_rlvr.losses"],
    2: ["lit_rlvr.rollout.loop", "lit_rlvr.rollout.revise"],
    3: ["lit_rlvr.module", "lit_rlvr.dpo", "lit_rlvr.g2d"],
    4: ["lit_rlvr.callbacks"],
    5: ["lit_rlvr.run.cli", "lit_rlvr.report.selection_report", "lit_rlvr.report.summary", "lit_rlvr.report.curves"],
}
"""Per layer, modules imported together in one fresh interpreter."""


def layer_of(module: str, layers: dict[str, int] = LAYERS) -> Optional[int]:
    """The layer of ``module`` by its longest prefix in ``layers`` (None: not placed).

    The package itself (``lit_rlvr``, its ``__init__``) is matched only exactly, so that a new
    module nobody placed is reported rather than taken for the package.
    """
    parts = module.split(".")
    for n in range(len(parts), 1, -1):
        name = ".".join(parts[:n])
        if name in layers:
            return layers[name]
    return layers.get(module)


def module_names(package_dir: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``package_dir`` (a package ``__init__`` is the package)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported_modules(name: str, path: Path, known: set[str], run_time_only: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every lit_rlvr import in the file, wherever it stands (functions, TYPE_CHECKING).

    ``run_time_only``: only the imports that run when the module is imported (its body's
    statements, not those in functions or under ``if TYPE_CHECKING``).
    """
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))] if run_time_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            for a in node.names:  # `from pkg import submodule` imports the submodule
                full = f"{base}.{a.name}"
                found.append((node.lineno, full if full in known else base))
    return [(line, m) for line, m in dict.fromkeys(found) if m == "lit_rlvr" or m.startswith("lit_rlvr.")]


def upward_imports(package_dir: Path, layers: dict[str, int] = LAYERS) -> tuple[list[str], list[str]]:
    """(imports from a lower layer to a higher one, modules no layer holds), as readable lines."""
    modules = module_names(package_dir)
    upward, unplaced = [], []
    for name, path in modules.items():
        own = layer_of(name, layers)
        if own is None:
            unplaced.append(name)
            continue
        for line, target in imported_modules(name, path, set(modules)):
            theirs = layer_of(target, layers)
            if theirs is not None and theirs > own:
                upward.append(f"{path.relative_to(package_dir.parent)}:{line}: {name} (layer {own}) imports {target} (layer {theirs})")
    return upward, unplaced


def import_circles(package_dir: Path, run_time_only: bool = False) -> list[set[str]]:
    """The module sets that import each other in a circle (strongly connected, two or more).

    Every import counts by default, also those in functions or under ``TYPE_CHECKING``: those
    only hide a circle from the interpreter, they do not remove it.
    """
    modules = module_names(package_dir)
    graph = {
        name: {m for _, m in imported_modules(name, path, set(modules), run_time_only) if m in modules and m != name}
        for name, path in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while not component or w != v:
                w = stack.pop()
                component.add(w)
            if len(component) > 1:
                circles.append(component)

    for name in sorted(graph):
        if name not in index:
            connect(name)
    return circles


def lab_imports(package_dir: Path, layers: dict[str, int] = LAYERS) -> list[str]:
    """Imports of the lab (``lit_rlvr.bench``, the top-level ``benchmarks``) by any module below it, as readable lines.

    Every import statement counts, wherever it stands; ``benchmarks`` is matched by the first part of
    the imported name, so ``from benchmarks.x import y`` and ``import benchmarks`` are both found.
    """
    modules = module_names(package_dir)
    found = []
    for name, path in modules.items():
        if (layer_of(name, layers) or 0) >= LAB:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                targets = [node.module or ""]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == "benchmarks" or (layer_of(target, layers) or 0) >= LAB:
                    found.append(f"{path.relative_to(package_dir.parent)}:{node.lineno}: {name} imports {target}")
    return found


def test_no_import_circle():
    assert import_circles(ROOT / "lit_rlvr", run_time_only=True) == []
    circles = [sorted(c) for c in import_circles(ROOT / "lit_rlvr")]
    assert not circles, f"import circles (counting imports in functions and under TYPE_CHECKING): {circles}"


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    upward, unplaced = upward_imports(ROOT / "lit_rlvr")
    assert not unplaced, f"place these modules in tests/test_layers.py LAYERS and docs/architecture.md: {unplaced}"
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_the_static_check_finds_an_upward_import_wherever_it_stands(tmp_path):
    package = tmp_path / "lit_rlvr"
    (package / "rollout").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "module.py").write_text("X = 1\n")
    (package / "rollout" / "__init__.py").write_text("")
    (package / "rollout" / "loop.py").write_text("from lit_rlvr.types import A\n")
    (package / "types.py").write_text(
        textwrap.dedent(
            """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from lit_rlvr.rollout import loop
            def f():
                import lit_rlvr.module
            """
        )
    )
    (package / "stray.py").write_text("")
    upward, unplaced = upward_imports(package)
    assert unplaced == ["lit_rlvr.stray"]
    assert [line.split(": ", 1)[1] for line in upward] == [
        "lit_rlvr.types (layer 0) imports lit_rlvr.rollout.loop (layer 2)",
        "lit_rlvr.types (layer 0) imports lit_rlvr.module (layer 3)",
    ]


THIRD_PARTY = ("torch", "lightning.pytorch", "transformers", "peft", "jsonargparse", "numpy", "matplotlib.pyplot")
"""Imported once before the forks of ``modules_loaded_by``: what every lit_rlvr import costs, and loads no lit_rlvr module."""

_FORK_SERVER = textwrap.dedent(
    """
    import importlib, json, os, sys
    for name in sys.argv[2:]:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    ours = [m for m in sys.modules if m.split(".")[0] in ("lit_rlvr", "benchmarks")]
    assert not ours, f"the preloaded packages loaded {ours}: the check would be void"
    results = {}
    for key, modules in json.loads(sys.argv[1]).items():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: import the group, report sys.modules, leave without cleanup
            os.close(read)
            try:
                for m in modules:
                    importlib.import_module(m)
                out = {"loaded": sorted(sys.modules)}
            except BaseException as e:
                out = {"error": f"{type(e).__name__}: {e}"}
            with os.fdopen(write, "w") as f:
                json.dump(out, f)
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            results[key] = json.loads(f.read() or '{"error": "the child wrote nothing"}')
        os.waitpid(pid, 0)
    print(json.dumps(results))
    """
)


def modules_loaded_by(groups: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per group, every module in ``sys.modules`` after importing the group's modules into a fresh interpreter.

    One interpreter imports the heavy third-party packages once (``THIRD_PARTY``, no lit_rlvr module), then
    forks a child per group, so each group starts from an interpreter that has imported nothing of lit_rlvr
    (a fresh interpreter per group cost about 4 s each on 2 idle cores, 19 s under load).
    """
    out = subprocess.run([sys.executable, "-c", _FORK_SERVER, json.dumps(groups), *THIRD_PARTY], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    errors = {k: r["error"] for k, r in results.items() if "error" in r}
    assert not errors, errors
    return {k: r["loaded"] for k, r in results.items()}


def _subcommand_modules() -> list[str]:
    from lit_rlvr.run.cli import SUBCOMMANDS

    return sorted({target.split(":")[0] for target, _ in SUBCOMMANDS.values()})


@pytest.fixture(scope="module")
def loaded_by_group() -> dict[str, list[str]]:
    """What each layer's representatives, and the CLI's subcommands together, load (one fork server)."""
    groups = {str(layer): modules for layer, modules in REPRESENTATIVES.items()}
    groups["subcommands"] = _subcommand_modules()
    groups |= {"stdlib only": ["json"], "types only": ["lit_rlvr.types"], "stdlib again": ["json"]}  # the server's own check
    return modules_loaded_by(groups)


def test_a_forked_group_starts_with_nothing_of_lit_rlvr_loaded(loaded_by_group):
    """The fork server's children are as fresh as a new interpreter for lit_rlvr: a group importing only the
    standard library, also after one that imported lit_rlvr, sees no lit_rlvr module; one importing a module sees it."""
    assert not [m for m in loaded_by_group["stdlib only"] + loaded_by_group["stdlib again"] if m.startswith("lit_rlvr")]
    assert "lit_rlvr.types" in loaded_by_group["types only"]
    assert "torch" in loaded_by_group["stdlib only"]  # preloaded, as intended


@pytest.mark.parametrize("layer", sorted(REPRESENTATIVES), ids=lambda n: NAMES[n].replace(" ", "_"))
def test_importing_a_layer_loads_no_module_of_a_higher_layer(layer, loaded_by_group):
    """A fresh interpreter (a fork of one that imported only third-party packages): what importing the
    layer's modules pulls in, by ``sys.modules``."""
    loaded = [k for k in loaded_by_group[str(layer)] if k == "lit_rlvr" or k.startswith("lit_rlvr.")]
    higher = [m for m in loaded if (layer_of(m) or 0) > layer and m != "lit_rlvr"]
    assert not higher, f"importing {REPRESENTATIVES[layer]} ({NAMES[layer]}) loaded higher layers: {higher}"
    if layer <= 3:  # the core never loads a selection method
        assert not [m for m in loaded if m.startswith("lit_rlvr.callbacks")]


def method_modules(package_dir: Path) -> set[str]:
    """The modules of ``lit_rlvr.callbacks`` that define a method: those its ``__init__`` imports a class from."""
    init = package_dir / "callbacks" / "__init__.py"
    tree = ast.parse(init.read_text())
    return {
        n.module for n in tree.body
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("lit_rlvr.callbacks.") and any(a.name[:1].isupper() for a in n.names)
    }


def cross_method_imports(package_dir: Path) -> list[str]:
    """``file:line: a imports b`` for every import from one method's file of another's (anywhere in the file)."""
    methods = method_modules(package_dir)
    modules = module_names(package_dir)
    out = []
    for name in sorted(n for n in modules if n.startswith("lit_rlvr.callbacks.")):
        for line, target in imported_modules(name, modules[name], set(modules)):
            if target in methods and target != name:
                out.append(f"{modules[name].name}:{line}: {name} imports {target}")
    return out


def test_no_method_imports_another_methods_file():
    assert len(method_modules(ROOT / "lit_rlvr")) >= 11  # ARRoL, DPS, ..., VIGOR: the check sees them
    found = cross_method_imports(ROOT / "lit_rlvr")
    assert not found, "a method imports another method's file (move what they share to lit_rlvr.selection_toolkit):\n" + "\n".join(found)


def test_the_cross_method_check_finds_a_method_importing_another(tmp_path):
    callbacks = tmp_path / "lit_rlvr" / "callbacks"
    callbacks.mkdir(parents=True)
    (tmp_path / "lit_rlvr" / "__init__.py").write_text("")
    (callbacks / "__init__.py").write_text("from lit_rlvr.callbacks.a import A\nfrom lit_rlvr.callbacks.b import B\n")
    (callbacks / "shared.py").write_text("X = 1\n")
    (callbacks / "a.py").write_text("from lit_rlvr.callbacks.shared import X\nclass A: ...\n")
    (callbacks / "b.py").write_text("def f():\n    from lit_rlvr.callbacks.a import A\nclass B: ...\n")
    assert cross_method_imports(tmp_path / "lit_rlvr") == ["b.py:2: lit_rlvr.callbacks.b imports lit_rlvr.callbacks.a"]


def test_nothing_below_the_lab_imports_the_benchmarks():
    """The product (core, methods, command line, reports) imports neither ``lit_rlvr.bench`` nor ``benchmarks/``."""
    found = lab_imports(ROOT / "lit_rlvr")
    assert not found, "imports of the benchmarks from the product:\n" + "\n".join(found)


def test_the_lab_check_finds_an_import_of_the_benchmarks_wherever_it_stands(tmp_path):
    package = tmp_path / "lit_rlvr"
    (package / "bench").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "bench" / "__init__.py").write_text("from lit_rlvr.run.cli import main\n")  # the lab may use the product
    (package / "cli.py").write_text("import benchmarks.bench_step\n")
    (package / "selection_report.py").write_text("def f():\n    from lit_rlvr.bench.report.runs import Run\n")
    assert [line.split(": ", 1)[1] for line in lab_imports(package)] == [
        "lit_rlvr.cli imports benchmarks.bench_step",
        "lit_rlvr.selection_report imports lit_rlvr.bench.report.runs",
    ]


def test_the_cli_s_subcommands_are_product_modules_that_load_no_benchmark_code(loaded_by_group):
    """``lit-rlvr <tool>`` imports its module by name (``importlib``): each is placed below the lab, and
    importing all of them in a fresh interpreter loads no ``lit_rlvr.bench`` and no ``benchmarks``."""
    modules = _subcommand_modules()
    placed = {m: layer_of(m) for m in modules}
    assert all(layer is not None and layer < LAB for layer in placed.values()), placed
    loaded = loaded_by_group["subcommands"]
    assert set(modules) <= set(loaded)
    lab = [m for m in loaded if m.split(".")[0] == "benchmarks" or (m.startswith("lit_rlvr.") and (layer_of(m) or 0) >= LAB)]
    assert not lab, f"importing the subcommands {modules} loaded benchmark code: {lab}"
