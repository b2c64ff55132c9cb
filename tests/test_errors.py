"""One exit-code table (issue 14): every error class's exit status comes from :class:`kbuild.errors.ExitCode`,
only ``kbuild/errors.py`` assigns one, and two classes share a status only when one inherits it from the other."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import tomllib

from kbuild import errors
from kbuild.errors import ExitCode, KBuildError

ROOT = Path(__file__).resolve().parents[1]


def error_classes(module: object = errors) -> list[type[KBuildError]]:
    return [c for _, c in inspect.getmembers(module, inspect.isclass) if issubclass(c, KBuildError)]


def introducers(classes: list[type[KBuildError]]) -> dict[int, list[str]]:
    """Exit status → the classes that introduce it: those whose direct error bases all have another status."""
    out: dict[int, list[str]] = {}
    for cls in classes:
        bases = [b for b in cls.__bases__ if issubclass(b, KBuildError)]
        if all(b.exit_code != cls.exit_code for b in bases):
            out.setdefault(int(cls.exit_code), []).append(cls.__name__)
    return out


def test_every_error_class_takes_its_status_from_the_table() -> None:
    classes = error_classes()
    assert len(classes) > 10
    bad = [c.__name__ for c in classes if type(c.exit_code) is not ExitCode]
    assert not bad, bad


def test_no_two_unrelated_error_classes_share_a_status() -> None:
    shared = {code: names for code, names in introducers(error_classes()).items() if len(names) > 1}
    assert not shared, shared


def test_the_check_catches_an_accidental_share() -> None:
    """Two unrelated classes on one status are flagged; a subclass that inherits a status is not."""

    class Untuned(KBuildError):
        exit_code = ExitCode.UNTUNED

    class Rejected(KBuildError):
        exit_code = ExitCode.UNTUNED  # the slip issue 14 found: two conditions, one number

    class Narrower(Untuned):
        pass

    assert introducers([KBuildError, Untuned, Narrower]) == {1: ["KBuildError"], 5: ["Untuned"]}
    assert introducers([KBuildError, Untuned, Rejected])[5] == ["Untuned", "Rejected"]


def test_the_conditions_that_shared_5_have_their_own_codes() -> None:
    from kbuild.build import tuning
    from kbuild.sass import verify
    from kbuild.tune.measure import client

    # The modules that raise them use the table's classes, not copies.
    assert tuning.UntunedError is errors.UntunedError
    assert verify.VerificationError is errors.VerificationError
    assert client.MeasureError is errors.MeasureError
    codes = {errors.UntunedError.exit_code, errors.VerificationError.exit_code, errors.MeasureError.exit_code}
    assert codes == {ExitCode.UNTUNED, ExitCode.REJECTED, ExitCode.MEASUREMENT} and len(set(map(int, codes))) == 3


def _source_files() -> list[Path]:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["scikit-build"]["wheel"]["packages"]
    return sorted(f for src in table.values() for f in (ROOT / src).rglob("*.py") if "__pycache__" not in f.parts)


def test_only_errors_py_assigns_exit_codes() -> None:
    """An error class elsewhere inherits its status; it never picks a number of its own."""
    files = _source_files()
    assert ROOT / "kbuild" / "errors.py" in files and ROOT / "kbuild" / "build" / "pipeline.py" in files
    found = []
    for path in files:
        if path == ROOT / "kbuild" / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    targets = (stmt.targets if isinstance(stmt, ast.Assign) else
                               [stmt.target] if isinstance(stmt, ast.AnnAssign) else [])
                    if any(isinstance(t, ast.Name) and t.id == "exit_code" for t in targets):
                        found.append(f"{path.relative_to(ROOT)}:{stmt.lineno} {node.name}")
    assert not found, found


def test_the_docstring_lists_every_code() -> None:
    doc = errors.__doc__ or ""
    for code in ExitCode:
        assert re.search(rf"^{code.value}\s+{code.name}\s+\S", doc, re.M), code


def test_verify_wheel_answers_with_the_tables_code() -> None:
    from kbuild.commands import verify_wheel

    assert verify_wheel.DIFFERS == ExitCode.WHEEL_DIFFERS


def test_every_error_crosses_a_process_boundary_unchanged() -> None:
    """Compiles run in a child process and prewarm tasks in Ray's workers: an error raised there must reach the CLI
    as it was raised (a ConfigError from an import in the child took three arguments to rebuild and failed)."""
    import pickle

    from kbuild.errors import ConfigError, KernelSourceError, LockMismatchError, ToolError, VerificationError

    for exc in (ConfigError("pyproject.toml", "targets", "bad"), KernelSourceError("p", "[tool.kbuild.kernels][0]", "x"),
                ToolError("ptxas", ["ptxas", "-v"], 255, "boom"), VerificationError(["a problem"]),
                LockMismatchError("kbuild.lock", ["one"])):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc) and vars(back) == vars(exc)
        assert back.exit_code == exc.exit_code
