"""elmo_hf's imports run one way: every module's imports (deferred ones inside functions too; not the type checker's `if
TYPE_CHECKING:` ones, which never run) are parsed, and the graph has no cycle; the model folder imports nothing outside
itself; the paths never import the model file; Triton is imported only by a CUDA path; `save_pretrained` writes every
module the model file reaches."""

import ast
import json
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, tiny_model

PACKAGE = REPO_ROOT / "elmo_hf"
# The modules below the model file: the cell, the derived copies, the resolver and the paths.
PATH_MODULES = (
    "lstm_cell",
    "weight_cache",
    "packed_steps",
    "lstm_paths",
    "cpu_kernels",
    "cuda_graphs",
    "cuda_kernels",
    "triton_lstm_kernels",
    "lstm_training_kernel",
)


def module_name(path, package=PACKAGE):
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package=PACKAGE):
    """{module: set of elmo_hf modules it imports anywhere in its file}."""
    modules = {module_name(path, package): path for path in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = {
            id(statement)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for statement in block.body
        }
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:  # `from . import module` imports the module; `from . import name`, the package
                    imported.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        graph[name] = {module for module in imported if module in modules and module != name}
    return graph


def find_cycle(graph):
    """A list of modules that import each other in a ring, or None."""
    state, trail = {}, []

    def visit(module):
        state[module] = "open"
        trail.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                return trail[trail.index(imported) :] + [imported]
            if imported not in state:
                cycle = visit(imported)
                if cycle:
                    return cycle
        state[module] = "done"
        trail.pop()
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_no_module_of_the_package_takes_part_in_an_import_cycle():
    graph = import_graph()
    assert "elmo_hf.model.modeling_elmo" in graph and graph["elmo_hf.model.modeling_elmo"]
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_a_deferred_import_cycle(tmp_path):
    package = tmp_path / "elmo_hf"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import thing\n")
    (package / "b.py").write_text("def thing():\n    from . import a\n")
    (package / "c.py").write_text("import elmo_hf.a\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import x\n")
    graph = import_graph(package)
    assert graph["elmo_hf.c"] == {"elmo_hf.a"}
    assert graph["elmo_hf.d"] == set()  # a type checker's import never runs
    assert find_cycle(graph) == ["elmo_hf.a", "elmo_hf.b", "elmo_hf.a"]


def test_the_model_folder_imports_only_itself():
    """elmo_hf/model/ is the code a checkpoint carries: its modules import each other and nothing else of elmo_hf."""
    graph = import_graph()
    model_modules = {name for name in graph if name.startswith("elmo_hf.model.")}
    assert "elmo_hf.model.modeling_elmo" in model_modules
    outside = {name: sorted(graph[name] - model_modules - {"elmo_hf.model"}) for name in sorted(model_modules)}
    assert not any(outside.values()), {name: imported for name, imported in outside.items() if imported}


def test_the_paths_never_import_the_model_file():
    graph = import_graph()
    for name in PATH_MODULES:
        reached, pending = set(), [f"elmo_hf.model.{name}"]
        while pending:
            module = pending.pop()
            if module not in reached:
                reached.add(module)
                pending.extend(graph[module])
        assert "elmo_hf.model.modeling_elmo" not in reached, name


def test_triton_is_imported_only_by_a_cuda_path():
    code = (
        "import sys, torch, elmo_hf.model.modeling_elmo as m\n"
        "from elmo_hf import ElmoConfig\n"
        "model = m.ElmoModel(ElmoConfig(lstm_dim=8, projection_dim=4, filters=[[1, 4]], num_highway_layers=0))\n"
        "with torch.no_grad(): model(torch.ones(1, 2, 50, dtype=torch.long))\n"
        "print('elmo_hf.model.triton_lstm_kernels' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False"


@pytest.mark.usefixtures("one_thread")
def test_save_pretrained_writes_every_module_the_model_file_reaches(tmp_path):
    graph = import_graph()
    reached, pending = set(), ["elmo_hf.model.modeling_elmo"]
    while pending:
        module = pending.pop()
        if module not in reached:
            reached.add(module)
            pending.extend(graph[module])
    assert {f"elmo_hf.model.{name}" for name in PATH_MODULES} <= reached
    tiny_model().save_pretrained(tmp_path)
    written = {path.stem for path in tmp_path.glob("*.py")}
    assert {module.rpartition(".")[2] for module in reached} <= written
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"]["AutoModel"] == "modeling_elmo.ElmoModel"
