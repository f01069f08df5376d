"""Mutation testing of the heads' composition and the tokenizer's char ids against their fast tests.

1. mutmut 3 (`pip install mutmut`) on `ElmoScalarMix`, `ElmoTaskEncoder` (the piece both heads share) and the two
   heads' `forward`, against tests/model/test_heads.py, test_head_features.py, test_modeling.py and test_tokenization.py
   (without the subprocess tests: trust_remote_code, pipelines). mutmut copies the code into `mutants/`, so it
   runs in a scratch copy of the repository with its own setup.cfg; OMP_NUM_THREADS=1 because mutmut forks its
   workers, and torch's thread pool does not survive a fork (every mutant then hangs and reads as a timeout).
2. `word_to_char_ids` is lru_cache'd, and mutmut 3 leaves decorated functions alone: it is mutated here, with
   mutmut's operators, one mutant at a time, against tests/model/test_tokenization.py.

    python tools/mutation_testing.py [--scratch /tmp/elmo-mutation]

Prints each tool's counts and the surviving mutants. Takes a few minutes on 2 cores.
"""

import argparse
import ast
import copy
import os
import pathlib
import shutil
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
TESTS = [
    "tests/model/test_heads.py",
    "tests/model/test_head_features.py",
    "tests/model/test_modeling.py",
    "tests/model/test_tokenization.py",
]
MUTANTS = [
    f"elmo_hf.model.modeling_elmo.x{name}*"
    for name in (
        "ǁElmoScalarMixǁ",
        "ǁElmoTaskEncoderǁ",
        "ǁElmoForTokenClassificationǁforward",
        "ǁElmoForSequenceClassificationǁforward",
    )
]
SETUP_CFG = """[mutmut]
source_paths = elmo_hf/model/modeling_elmo.py
also_copy =
    elmo_hf/
    conversion/
    tests/
pytest_add_cli_args_test_selection =
{tests}
    -k
    not trust_remote_code and not pipelines
"""
SWAP = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
}


def scratch_copy(scratch):
    if scratch.exists():
        shutil.rmtree(scratch)
    for name in ("elmo_hf", "conversion", "tests"):
        shutil.copytree(REPO_ROOT / name, scratch / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "setup.py", scratch / "setup.py")


def run_mutmut(scratch, env):
    (scratch / "setup.cfg").write_text(SETUP_CFG.format(tests="\n".join(f"    {test}" for test in TESTS)))
    subprocess.run(
        ["mutmut", "run", "--max-children", "2", *MUTANTS], cwd=scratch, env=env, check=True, stdout=subprocess.DEVNULL
    )
    listed = subprocess.run(
        ["mutmut", "results", "--all", "true"], cwd=scratch, env=env, capture_output=True, text=True, check=True
    ).stdout
    selected = (
        "ǁElmoScalarMixǁ",
        "ǁElmoTaskEncoderǁ",
        "ǁElmoForTokenClassificationǁforward",
        "ǁElmoForSequenceClassificationǁforward",
    )
    results = [line.strip().rsplit(": ", 1) for line in listed.splitlines() if any(s in line for s in selected)]
    survivors = [name for name, status in results if status == "survived"]
    print(f"mutmut: {len(results)} mutants, {len(survivors)} survived ({len(survivors) / len(results):.1%})")
    for name in survivors:
        shown = subprocess.run(["mutmut", "show", name], cwd=scratch, env=env, capture_output=True, text=True).stdout
        changed = [line for line in shown.splitlines() if line[:1] in "-+" and not line.startswith(("---", "+++"))]
        print(f"  survived {name.split('.')[-1]}: " + " => ".join(" ".join(line[1:].split()) for line in changed))


def function_mutations(function):
    """(walk index, description, mutate) for each mutation site inside `function` (decorators excluded)."""
    found = []
    for index, node in enumerate(ast.walk(function)):
        if getattr(node, "lineno", function.lineno) < function.lineno:
            continue
        where = f"(line {node.lineno - function.lineno + 1} of the function)" if hasattr(node, "lineno") else ""
        if isinstance(node, ast.Constant) and type(node.value) is int:
            found.append(
                (index, f"{node.value} -> {node.value + 1} {where}", lambda n: setattr(n, "value", n.value + 1))
            )
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node is not getattr(function.body[0], "value", None)
        ):
            found.append(
                (index, f"{node.value!r} -> 'XX..XX' {where}", lambda n: setattr(n, "value", f"XX{n.value}XX"))
            )
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAP:
            found.append(
                (
                    index,
                    f"{type(node.op).__name__} -> {SWAP[type(node.op)].__name__} {where}",
                    lambda n: setattr(n, "op", SWAP[type(n.op)]()),
                )
            )
        elif isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP:
            found.append(
                (
                    index,
                    f"{type(node.ops[0]).__name__} -> {SWAP[type(node.ops[0])].__name__} {where}",
                    lambda n: n.ops.__setitem__(0, SWAP[type(n.ops[0])]()),
                )
            )
        elif isinstance(node, ast.Slice):
            found.append(
                (
                    index,
                    f"slice bounds dropped {where}",
                    lambda n: (setattr(n, "lower", None), setattr(n, "upper", None)),
                )
            )
        elif isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) > 1:
            for position in range(len(node.elts)):
                found.append(
                    (index, f"element {position} of a list removed {where}", lambda n, p=position: n.elts.pop(p))
                )
    return found


def run_function_mutations(scratch, env, file, name, tests):
    path = scratch / file
    original = path.read_text(encoding="utf-8")
    tree = ast.parse(original)

    def find(tree):
        return next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == name)

    survivors, total = [], 0
    try:
        for index, description, mutate in function_mutations(find(tree)):
            mutant = copy.deepcopy(tree)
            mutate(list(ast.walk(find(mutant)))[index])
            path.write_text(ast.unparse(mutant), encoding="utf-8")
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                cwd=scratch,
                env=env,
                capture_output=True,
            )
            total += 1
            if done.returncode == 0:
                survivors.append(description)
    finally:
        path.write_text(original, encoding="utf-8")
    print(f"{name}: {total} mutants, {len(survivors)} survived ({len(survivors) / total:.1%})")
    for description in survivors:
        print(f"  survived {description}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scratch", type=pathlib.Path, default=pathlib.Path("/tmp/elmo-mutation"))
    args = parser.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    scratch_copy(args.scratch)
    run_mutmut(args.scratch, env)
    run_function_mutations(
        args.scratch, env, "elmo_hf/model/char_ids.py", "word_to_char_ids", ["tests/model/test_tokenization.py"]
    )


if __name__ == "__main__":
    main()
