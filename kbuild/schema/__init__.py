"""The JSON schema of ``[tool.kbuild]``, generated from the settings model (:mod:`kbuild.settings.model`; each
field's docstring is its description) and committed beside this module as ``kbuild.schema.json``.

Regenerate with ``python -m kbuild.schema > kbuild/schema/kbuild.schema.json``; a test fails when
the committed file drifts from the model.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from kbuild.settings.fields import type_hints
from kbuild.settings.model import Settings


def field_docs(cls: Any) -> dict[str, str]:
    """The docstring under each field of a settings dataclass (the scikit-build-core convention)."""
    source = textwrap.dedent(inspect.getsource(cls))
    tree = ast.parse(source)
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def json_schema() -> dict[str, Any]:
    """JSON schema of ``[tool.kbuild]``, generated from the model (committed; a test checks it)."""

    def schema_for(tp: Any) -> dict[str, Any]:
        origin = get_origin(tp)
        if origin in (Union, types.UnionType):
            opts = [a for a in get_args(tp) if a is not type(None)]
            return schema_for(opts[0]) if len(opts) == 1 else {"anyOf": [schema_for(a) for a in opts]}
        if origin is Literal:
            return {"enum": list(get_args(tp))}
        if origin is list:
            return {"type": "array", "items": schema_for(get_args(tp)[0])}
        if origin is dict:
            return {"type": "object", "additionalProperties": schema_for(get_args(tp)[1])}
        if dataclasses.is_dataclass(tp):
            docs = field_docs(tp)
            hints = type_hints(tp)
            props = {}
            required = []
            for f in dataclasses.fields(tp):
                if f.metadata.get("internal"):
                    continue
                entry = schema_for(hints[f.name])
                if f.name in docs:
                    entry["description"] = docs[f.name]
                if f.metadata.get("env"):
                    entry["x-env"] = f.metadata["env"]
                if f.metadata.get("env_only"):
                    entry["x-env-only"] = True
                if f.metadata.get("key"):
                    entry["x-in-key"] = True
                entry.update(f.metadata.get("schema") or {})
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    required.append(f.name)
                props[f.name] = entry
            out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": props}
            if required:
                out["required"] = required
            if tp.__doc__:
                out["description"] = " ".join(tp.__doc__.split())
            return out
        scalars: dict[Any, dict[str, Any]] = {bool: {"type": "boolean"}, int: {"type": "integer"},
                                              float: {"type": "number"}, str: {"type": "string"},
                                              Path: {"type": "string", "minLength": 1}}
        return dict(scalars[tp])

    schema = schema_for(Settings)
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    schema["title"] = "[tool.kbuild]"
    return schema


__all__ = ["field_docs", "json_schema"]
