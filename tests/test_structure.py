"""The package's shape: each subpackage imports only those below it, and no module or function
grows past what a reader takes in at once, in the package and in its benchmarks."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "graphformer"
BENCHMARKS = PACKAGE.parent / "benchmarks"  # a package of its own, run as python -m benchmarks.NAME

# Lowest first. A module may import its own layer and those before it; the top-level modules
# that are not listed (errors, files, config_io, vocab, choices, rss...) are the floor.
LAYERS = ["data", "graphs", "attention", "model", "decoding", "evaluation", "training", "running", "viz", "cli"]
FLOOR = -1
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py"))


def layer_of(module: str) -> int:
    """``graphformer.model.layers`` -> the index of ``model``; the floor for anything else."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return FLOOR


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, name: str):
    """Every graphformer module a file imports, lazily inside functions too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("graphformer"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing package
                base = ".".join(name.split(".")[: len(name.split(".")) - node.level + 1] + ([base] if base else []))
            if base.startswith("graphformer"):
                yield base


def test_no_module_imports_a_higher_layer():
    upward = []
    for path in modules():
        name = module_name(path)
        if name in ("graphformer", "graphformer.__main__"):
            continue  # the package's lazy exports and the entry point stand above everything
        for target in imported(ast.parse(path.read_text(encoding="utf-8")), name):
            if layer_of(target) > layer_of(name):
                upward.append(f"{name} imports {target}")
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


@pytest.mark.parametrize(
    "path", modules() + sorted(BENCHMARKS.glob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE.parent))
)
def test_modules_and_functions_stay_short(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_MODULE_LINES, f"{path.name} has {len(lines)} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse("\n".join(lines)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{path.name}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}"


@pytest.mark.parametrize("path", sorted(BENCHMARKS.glob("*.py")), ids=lambda p: p.name)
def test_benchmarks_import_each_other_as_a_package(path):
    """Run from the repository root, ``benchmarks.x`` is found as graphformer is: no benchmark
    puts a folder on the path itself, and each imports the others by their package name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    edits = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys"
    ]
    assert not edits, f"{path.name} uses sys.path on lines {edits}"
    siblings = {p.stem for p in BENCHMARKS.glob("*.py")} - {"__init__"}
    bare = [
        alias.name
        for node in ast.walk(tree)
        for alias in (node.names if isinstance(node, ast.Import) else [])
        if alias.name in siblings
    ] + [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module in siblings]
    assert not bare, f"{path.name} imports {bare} without the package name (benchmarks.{bare[0]})"


def test_the_layer_check_sees_an_upward_import():
    tree = ast.parse("def f():\n    from graphformer.viz import plots\n")
    assert [layer_of(t) for t in imported(tree, "graphformer.training.trainer")] == [LAYERS.index("viz")]
    assert layer_of("graphformer.training.trainer") < LAYERS.index("viz")


def imported_modules(tree: ast.AST, name: str, is_package: bool, known: set[str]):
    """The graphformer modules a file imports, lazily inside functions too, to the module: ``from
    graphformer.attention import blocked`` imports ``graphformer.attention.blocked``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing package
                package = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                module = f"{base}.{alias.name}"
                yield module if module in known else base


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (module -> the modules it imports) as [a, b, ..., a], or None."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(module, path):
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return path[path.index(target) :] + [target]
            if target not in state and (found := visit(target, path + [target])):
                return found
        state[module] = "done"
        return None

    return next((found for module in sorted(graph) if module not in state and (found := visit(module, [module]))), None)


def test_no_import_cycle_counting_imports_inside_functions():
    known = {module_name(p) for p in modules()}
    graph = {
        module_name(p): set(
            imported_modules(ast.parse(p.read_text(encoding="utf-8")), module_name(p), p.name == "__init__.py", known)
        )
        - {module_name(p)}
        for p in modules()
    }
    cycle = import_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_a_cycle_through_a_lazy_import():
    known = {"graphformer.model.config", "graphformer.model.factory"}
    lazy = ast.parse("def check():\n    from graphformer.model.factory import build_model\n")
    eager = ast.parse("from graphformer.model import config\n")
    graph = {
        "graphformer.model.config": set(imported_modules(lazy, "graphformer.model.config", False, known)),
        "graphformer.model.factory": set(imported_modules(eager, "graphformer.model.factory", False, known)),
    }
    assert import_cycle(graph) == ["graphformer.model.config", "graphformer.model.factory", "graphformer.model.config"]
