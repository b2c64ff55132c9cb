"""Whether a global value Triton folds into a kernel is plainly a function of the source files.

Triton folds module globals such as ``SCALE = tl.constexpr(2.0)`` (or ``consts.SCALE``) into a kernel's code, so
the memo (:mod:`kbuild.build.memo`) may reuse keys only when each such value is *proven* to follow from the files
it fingerprints: bound once, at the top of its module, to literals (arithmetic, ``tl.constexpr(...)``, pure
builtins, ``math``, and other such proven globals or an import of one), and rebound by nothing.
:class:`Provenance` decides that, reading the defining module's source and the source of every file in its scope
for code that could rebind the name (``consts.SCALE = ...``, ``setattr``, ``exec``, ``vars(m)``, ``__dict__``,
``globals()`` in the defining module...): see the memo's module docstring for the whole rule.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path

#: Calls whose result depends on their arguments only.
_PURE_CALLS = frozenset({"int", "float", "bool", "str", "tuple", "abs", "min", "max", "round", "pow", "len"})
#: Modules whose attributes are constants of the installed version (covered by the fingerprint).
_CONSTANT_MODULES = frozenset({"triton", "math"})


#: Names through which code writes a namespace without spelling the name it binds, called by name
#: (``exec(...)``, ``vars(m)[...]``): ``exec``/``eval`` run any code; ``vars``, ``setattr`` with a computed name
#: and ``__builtins__`` reach any module.
_WRITERS = frozenset({"exec", "eval", "vars", "setattr", "delattr", "__builtins__"})
#: The same as attributes of any object: ``m.__dict__[...]``, ``object.__setattr__(m, ...)``,
#: ``monkeypatch.setattr(m, name, ...)`` (``x.exec``/``x.eval`` count only on the ``builtins`` module:
#: ``model.eval()`` writes nothing).
_WRITER_ATTRIBUTES = frozenset({"__dict__", "__setattr__", "__delattr__", "setattr", "delattr", "__builtins__"})
#: Names that write the namespace of the module they are used in: ``globals()["SCALE"] = ...``.
_OWN_WRITERS = frozenset({"globals", "locals"})
_SETATTRS = frozenset({"setattr", "delattr", "__setattr__", "__delattr__"})


@dataclasses.dataclass(frozen=True)
class _Writes:
    """What one module's source can rebind: the attribute names it assigns or deletes (``m.SCALE = ...``,
    ``del m.SCALE``, ``setattr(m, "SCALE", v)``), and the first construct that writes a namespace without
    naming what it binds, in any module (``opaque``) or in its own (``opaque_own``: ``globals()``)."""

    attributes: frozenset[str]
    opaque: str | None
    opaque_own: str | None

    @classmethod
    def of(cls, tree: ast.Module | None, where: str) -> _Writes:
        if tree is None:
            return cls(frozenset(), f"{where} is not Python source kbuild can read", None)
        builtins_names = {"builtins", "__builtins__"} | {
            a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
            if a.name == "builtins"}
        attributes: set[str] = set()
        named: set[int] = set()  # the function of setattr(m, "NAME", v): a named write, not an opaque one
        opaque: str | None = None
        own: str | None = None
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = _called_name(node.func)
            texts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if called in _SETATTRS and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args):
                if any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args[1:2]) \
                        or any("." in t for t in texts):  # monkeypatch.setattr("pkg.mod.NAME", value)
                    attributes.update(t.rpartition(".")[2] for t in texts)
                    named.add(id(node.func))
            elif called == "getattr" and any(t in _WRITERS | _WRITER_ATTRIBUTES | _OWN_WRITERS for t in texts):
                opaque = opaque or f"{where}:{node.lineno} gets {next(t for t in texts if t in _WRITERS | _WRITER_ATTRIBUTES | _OWN_WRITERS)} by name"
        for node in ast.walk(tree):
            line = f"{where}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute):
                if isinstance(node.ctx, (ast.Store, ast.Del)):
                    attributes.add(node.attr)
                on_builtins = isinstance(node.value, ast.Name) and node.value.id in builtins_names
                if id(node) not in named and (node.attr in _WRITER_ATTRIBUTES or
                                              (on_builtins and node.attr in _WRITERS | _OWN_WRITERS)):
                    opaque = opaque or f"{line} uses .{node.attr}"
            elif isinstance(node, ast.Name) and id(node) not in named:
                if node.id in _WRITERS:
                    opaque = opaque or f"{line} uses {node.id}"
                elif node.id in _OWN_WRITERS:
                    own = own or f"{line} uses {node.id}"
        return cls(frozenset(attributes), opaque, own)


def _called_name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


class Provenance:
    """Decides whether module-level names are bound, once, to values computed from literals alone, and
    rebound by nothing: neither by the defining module nor by the source files in ``scope`` (the loose
    files of the fingerprint), see :class:`_Writes`. ``why`` holds the reason of the last refusal.

    :meth:`proven` answers for one ``module.name``; the modules must be loaded (``sys.modules``)."""

    def __init__(self, scope: Iterable[str] = ()) -> None:
        from importlib.machinery import all_suffixes

        self._trees: dict[str, ast.Module | None] = {}
        self._scope = sorted({f for f in scope if f.endswith(tuple(all_suffixes()))})  # modules, not pyproject.toml
        self._writes: dict[str, _Writes] = {}
        self.why = ""

    def _writes_of(self, path: str) -> _Writes:
        if path not in self._writes:
            tree = None
            if path.endswith(".py"):
                try:
                    tree = ast.parse(Path(path).read_bytes())
                except (OSError, SyntaxError, ValueError):
                    tree = None
            self._writes[path] = _Writes.of(tree, path)
        return self._writes[path]

    def _rebound(self, module: str, name: str) -> str | None:
        """Why ``module.name`` may be rebound after its one binding (None: nothing can rebind it)."""
        path = getattr(sys.modules.get(module), "__file__", None)
        own = self._writes_of(os.path.normpath(os.path.abspath(path))) if isinstance(path, str) else None
        if own is None:
            return f"{module} has no source file"
        if own.opaque_own or own.opaque:
            return own.opaque_own or own.opaque
        if name in own.attributes:
            return f"{path} assigns an attribute named {name}"
        for f in self._scope:
            w = self._writes_of(f)
            if w.opaque:
                return w.opaque
            if name in w.attributes:
                return f"{f} assigns an attribute named {name}"
        return None

    def _tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = getattr(sys.modules.get(module), "__file__", None)
            tree = None
            if isinstance(path, str) and path.endswith(".py"):
                try:
                    tree = ast.parse(Path(path).read_bytes())
                except (OSError, SyntaxError, ValueError):
                    tree = None
            self._trees[module] = tree
        return self._trees[module]

    @staticmethod
    def _bindings(tree: ast.Module, name: str) -> list[tuple[ast.AST, bool]]:
        """Every statement that binds ``name`` in the module's namespace, and whether it is a direct child of
        the module body. ``global name`` in a function and ``from m import *`` count as bindings."""
        found: list[tuple[ast.AST, bool]] = []

        def binds_here(node: ast.AST) -> bool:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    return True
                if isinstance(sub, ast.alias) and (sub.name == "*" or (sub.asname or sub.name.split(".")[0]) == name):
                    return True
                if isinstance(sub, ast.ExceptHandler) and sub.name == name:
                    return True
            return False

        def visit(stmts: list[ast.stmt], top: bool) -> None:
            for st in stmts:
                if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    if st.name == name:
                        found.append((st, top))
                    if any(isinstance(g, ast.Global) and name in g.names for g in ast.walk(st)):
                        found.append((st, False))
                    continue
                bodies = [getattr(st, f) for f in ("body", "orelse", "finalbody") if isinstance(getattr(st, f, None), list)]
                bodies += [h.body for h in getattr(st, "handlers", [])] + [c.body for c in getattr(st, "cases", [])]
                if bodies:
                    header = [getattr(st, f) for f in ("test", "target", "iter", "items", "subject", "handlers")
                              if getattr(st, f, None) is not None]
                    if any(binds_here(h) if isinstance(h, ast.AST) else any(binds_here(x) for x in h) for h in header):
                        found.append((st, False))
                    for body in bodies:
                        visit(body, False)
                elif binds_here(st):
                    found.append((st, top))

        visit(tree.body, True)
        return found

    def _import_target(self, module: str, name: str) -> str | None:
        """The module a name is bound to by ``import x.y [as name]`` or ``from p import m [as name]``."""
        tree = self._tree(module)
        if tree is None:
            return None
        bindings = self._bindings(tree, name)
        if len(bindings) != 1 or not bindings[0][1]:
            return None
        st = bindings[0][0]
        if isinstance(st, ast.Import):
            alias = next(a for a in st.names if (a.asname or a.name.split(".")[0]) == name)
            return alias.name if alias.asname else alias.name.split(".")[0]
        if isinstance(st, ast.ImportFrom):
            alias = next(a for a in st.names if (a.asname or a.name) == name)
            source = self._resolve(module, st)
            target = f"{source}.{alias.name}" if source else None
            return target if target in sys.modules else None
        return None

    @staticmethod
    def _resolve(module: str, st: ast.ImportFrom) -> str | None:
        package = getattr(sys.modules.get(module), "__package__", None)
        try:
            return importlib.util.resolve_name("." * st.level + (st.module or ""), package) if st.level else st.module
        except (ImportError, ValueError):
            return None

    def proven(self, module: str | None, name: str, depth: int = 0) -> bool:
        """Whether ``module.name`` is bound once, at the top of the module, to a literal-only value, and
        nothing can rebind it."""
        if module is None or depth > 32:
            self.why = "no module, or too deep a chain of names"
            return False
        if module.partition(".")[0] in _CONSTANT_MODULES:
            return True
        tree = self._tree(module)
        if tree is None:
            self.why = f"{module} has no Python source"
            return False
        bindings = self._bindings(tree, name)
        if len(bindings) != 1 or not bindings[0][1]:
            self.why = f"{module}.{name} is bound {len(bindings)} times, or not at the top of the module"
            return False
        rebound = self._rebound(module, name)
        if rebound is not None:
            self.why = f"{module}.{name} may be rebound: {rebound}"
            return False
        self.why = f"{module}.{name} is not computed from literals alone"
        st = bindings[0][0]
        if isinstance(st, ast.ImportFrom) and all(a.name != "*" for a in st.names):
            alias = next(a for a in st.names if (a.asname or a.name) == name)
            source = self._resolve(module, st)
            return source is not None and f"{source}.{alias.name}" not in sys.modules and \
                self.proven(source, alias.name, depth + 1)
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            return self._pure(module, st.value, depth)
        if isinstance(st, ast.AnnAssign) and st.value is not None and isinstance(st.target, ast.Name):
            return self._pure(module, st.value, depth)
        return False

    def _attribute_module(self, module: str, node: ast.Attribute) -> tuple[str, str] | None:
        """``(module, attribute)`` for ``m.attr`` / ``pkg.sub.attr`` where the root names an imported module."""
        chain: list[str] = []
        root: ast.expr = node
        while isinstance(root, ast.Attribute):
            chain.insert(0, root.attr)
            root = root.value
        if not isinstance(root, ast.Name):
            return None
        target = self._import_target(module, root.id)
        if target is None:
            return None
        return ".".join([target, *chain[:-1]]), chain[-1]

    def _pure(self, module: str, expr: ast.expr, depth: int) -> bool:
        if isinstance(expr, ast.Constant):
            return True
        if isinstance(expr, ast.UnaryOp):
            return self._pure(module, expr.operand, depth)
        if isinstance(expr, ast.BinOp):
            return self._pure(module, expr.left, depth) and self._pure(module, expr.right, depth)
        if isinstance(expr, ast.BoolOp):
            return all(self._pure(module, v, depth) for v in expr.values)
        if isinstance(expr, ast.Compare):
            return all(self._pure(module, v, depth) for v in (expr.left, *expr.comparators))
        if isinstance(expr, ast.IfExp):
            return all(self._pure(module, v, depth) for v in (expr.test, expr.body, expr.orelse))
        if isinstance(expr, (ast.Tuple, ast.List)):
            return all(not isinstance(e, ast.Starred) and self._pure(module, e, depth) for e in expr.elts)
        if isinstance(expr, ast.Name):
            return self.proven(module, expr.id, depth + 1)
        if isinstance(expr, ast.Attribute):
            owner = self._attribute_module(module, expr)
            return owner is not None and self.proven(owner[0], owner[1], depth + 1)
        if isinstance(expr, ast.Call):
            args = [*expr.args, *(k.value for k in expr.keywords)]
            if any(isinstance(a, ast.Starred) for a in expr.args) or any(k.arg is None for k in expr.keywords):
                return False
            if not all(self._pure(module, a, depth) for a in args):
                return False
            func = expr.func
            if isinstance(func, ast.Name):
                tree = self._tree(module)
                if func.id in _PURE_CALLS and hasattr(builtins, func.id):
                    return tree is not None and not self._bindings(tree, func.id)
                return func.id == "constexpr" and self._imported_from_triton(module, func.id)
            if isinstance(func, ast.Attribute):
                owner = self._attribute_module(module, func)
                return owner is not None and (owner[0].partition(".")[0] == "math"
                                              or (owner[0].partition(".")[0] == "triton" and owner[1] == "constexpr"))
        return False

    def _imported_from_triton(self, module: str, name: str) -> bool:
        """``from triton.language import constexpr`` (or ``from triton.language.core import ...``)."""
        tree = self._tree(module)
        bindings = self._bindings(tree, name) if tree is not None else []
        if len(bindings) != 1 or not isinstance(bindings[0][0], ast.ImportFrom):
            return False
        source = self._resolve(module, bindings[0][0])  # type: ignore[arg-type]
        return source is not None and source.partition(".")[0] == "triton"


__all__ = ["Provenance"]
