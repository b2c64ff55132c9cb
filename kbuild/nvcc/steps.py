"""The cached steps of nvcc's plan, ``cicc`` and ``ptxas`` (and ``cudafe++``): their inputs, outputs and keys.

``cicc`` compiles the translation unit preprocessed for one architecture (``*.cpp1.ii``) to PTX and, beside
it, three small host-side files (``--gen_c_file_name``, ``--stub_file_name``, ``--gen_device_file_name``)
that later steps include; ``ptxas`` assembles that PTX into the cubin of one SM. Both are pure functions
of their input files and arguments, for one build of the tool.

A step's key is sha256 over canonical JSON of: the tool and its identity (the sha256 of its executable,
and nvcc's ``--version`` for the whole toolkit), its arguments with every path of kbuild's temporary
directory written as ``@TMP@`` and the output file names left out, and the sha256 of each input file's
contents (the temporary directory's path in them written as ``@TMP@`` too).

Two values of a ``cicc`` command depend on where the source lives: the source's absolute path
(``--orig_src_path_name``) and the module id nvcc derives from it (the file ``--module_id_file_name``
names). They are left out of the first key so that two projects compiling the same translation unit
share the PTX. When the module id appears in cicc's outputs (static, anonymous-namespace and CCCL's
internal-linkage device symbols carry it: ``_ZN47_INTERNAL_<module id>…``) and the path does not, the
outputs are stored with the module id written as a placeholder of the same length
(:func:`module_id_placeholder`) under a key that adds that length (:meth:`Step.relocated_key`), and a
restore writes the current unit's module id back: equal lengths keep every mangled name's length
prefix and every offset in a cubin as they are. ``ptxas`` steps of such a unit are keyed by their PTX
with the module id so replaced, and store their cubin the same way. When the path appears too, or the
placeholder already occurs in an output, the entry under the first key is only a pointer and the
outputs are stored under a second key that includes both values (:meth:`Step.volatile_key`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbuild.canonical import canonical_json

#: How a temporary-directory path is written in keys and in stored outputs.
TMP_PLACEHOLDER = "@KBUILD_NVCC_TMP@"

#: The format of the components below; bumped when they change.
STEP_KEY_SCHEMA = 1

#: cicc's output arguments (flag → role).
_CICC_OUTPUTS = {"-o": "ptx", "--gen_c_file_name": "gen_c", "--stub_file_name": "stub",
                 "--gen_device_file_name": "gen_device"}
#: cicc's arguments whose value depends on where the source lives (left out of the first key).
_CICC_VOLATILE = ("--orig_src_path_name",)
_CICC_MODULE_ID = "--module_id_file_name"


class NotCacheable(Exception):
    """The step's arguments are not ones kbuild reads with certainty; ``str()`` says why."""


@dataclass(frozen=True)
class Step:
    """A cached step: its key components, input files and output files by role."""

    tool: str
    components: dict[str, Any]
    outputs: dict[str, Path]
    """Output files by role (``ptx``, ``stub``, ``cubin``, ...)."""
    volatile: dict[str, str]
    """Values left out of the first key (cicc only): the source's path and the module id."""
    arch: str
    relocate: str | None = None
    """A ptxas step's module id, written as its placeholder in the key's PTX digest and in the stored cubin."""

    @property
    def key(self) -> str:
        return hashlib.sha256(canonical_json(self.components, ascii_only=True)).hexdigest()

    def volatile_key(self) -> str:
        """The second key: the first one with the path-dependent values."""
        return hashlib.sha256(canonical_json({"first": self.key, "volatile": self.volatile},
                                             ascii_only=True)).hexdigest()


    def relocated_key(self, module_id: str) -> str:
        """The key of outputs stored with ``module_id`` written as its placeholder: the first key and the length."""
        return hashlib.sha256(canonical_json({"first": self.key, "module_id_length": len(module_id)},
                                             ascii_only=True)).hexdigest()


#: What :func:`module_id_placeholder` repeats.
MODULE_ID_SEED = "KBUILDMODULEID"


def module_id_placeholder(module_id: str) -> str:
    """The stand-in for ``module_id`` in stored outputs: as long as it, so that nothing around it moves."""
    return (MODULE_ID_SEED * (len(module_id) // len(MODULE_ID_SEED) + 1))[:len(module_id)]


def _file_digest(path: Path, tmp: str, module_id: str | None = None) -> str:
    data = path.read_bytes().replace(tmp.encode(), TMP_PLACEHOLDER.encode())
    if module_id:
        data = data.replace(module_id.encode(), module_id_placeholder(module_id).encode())
    return hashlib.sha256(data).hexdigest()


def _norm(arg: str, tmp: str) -> str:
    return arg.replace(tmp, TMP_PLACEHOLDER)


def _arguments(argv: tuple[str, ...]) -> list[str]:
    """The step's arguments; :class:`NotCacheable` when one is a response file (``@file``): the key would not
    cover what it says."""
    found = next((a for a in argv[1:] if a.startswith("@")), None)
    if found is not None:
        raise NotCacheable(f"{Path(argv[0]).name} reads arguments from the response file {found}")
    return list(argv[1:])


def cicc_step(argv: tuple[str, ...], *, cwd: Path, tmp: str, identity: dict[str, Any]) -> Step:
    """The :class:`Step` of one ``cicc`` command. :class:`NotCacheable` when its input (exactly one
    ``*.ii`` argument) or outputs are not found as expected."""
    args = _arguments(argv)
    outputs: dict[str, Path] = {}
    volatile: dict[str, str] = {}
    kept: list[str] = []
    inputs: list[Path] = []
    module_id: Path | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in _CICC_OUTPUTS or a in _CICC_VOLATILE or a == _CICC_MODULE_ID:
            if i + 1 >= len(args):
                raise NotCacheable(f"cicc's {a} has no value")
            value = args[i + 1]
            if a in _CICC_OUTPUTS:
                outputs[_CICC_OUTPUTS[a]] = cwd / value
                kept.append(a)  # the flag stays (it changes what cicc writes), the name does not
            elif a in _CICC_VOLATILE:
                volatile[a] = value
                kept.append(a)
            else:
                module_id = cwd / value
                kept.append(a)
            i += 2
            continue
        if a == "--gen_module_id_file":
            raise NotCacheable("cicc generates the module id file itself (--gen_module_id_file)")
        if not a.startswith("-") and a.endswith(".ii"):
            inputs.append(cwd / a)
            kept.append("@INPUT@")
        else:
            kept.append(_norm(a, tmp))
        i += 1
    if len(inputs) != 1:
        raise NotCacheable(f"cicc has {len(inputs)} preprocessed inputs (*.ii), expected 1")
    if "ptx" not in outputs:
        raise NotCacheable("cicc writes no PTX (-o)")
    arch = next((args[j + 1] for j, a in enumerate(args[:-1]) if a == "-arch"), "?")
    if module_id is not None:
        if not module_id.is_file():
            raise NotCacheable(f"cicc's module id file {module_id} does not exist")
        volatile["module_id"] = module_id.read_text(errors="replace").strip()
    components = {
        "schema": STEP_KEY_SCHEMA,
        "tool": "cicc",
        "identity": identity,
        "args": kept,
        "input_sha256": _file_digest(inputs[0], tmp),
        "outputs": sorted(outputs),
    }
    return Step("cicc", components, outputs, volatile, arch)


def cudafe_step(argv: tuple[str, ...], *, cwd: Path, tmp: str, identity: dict[str, Any]) -> Step:
    """The :class:`Step` of the ``cudafe++`` command: the host-side split of the translation unit preprocessed
    for the host (one ``*.ii`` input) into ``--gen_c_file_name`` and, with ``--gen_module_id_file``, the module
    id file. Every argument but the output names is in the key, the source's path included (the module id is
    derived from it). Its stub file is not kept: the last cicc step writes the same file again."""
    args = _arguments(argv)
    kept: list[str] = []
    inputs: list[Path] = []
    outputs: dict[str, Path] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--gen_c_file_name", "--module_id_file_name", "--stub_file_name"):
            if i + 1 >= len(args):
                raise NotCacheable(f"cudafe++'s {a} has no value")
            if a == "--gen_c_file_name":
                outputs["gen_c"] = cwd / args[i + 1]
            elif a == "--module_id_file_name":
                outputs["module_id"] = cwd / args[i + 1]
            kept.extend([a] if a != "--stub_file_name" else [a, _norm(args[i + 1], tmp)])
            i += 2
            continue
        if not a.startswith("-") and a.endswith(".ii"):
            inputs.append(cwd / a)
            kept.append("@INPUT@")
        else:
            kept.append(_norm(a, tmp))
        i += 1
    if len(inputs) != 1:
        raise NotCacheable(f"cudafe++ has {len(inputs)} preprocessed inputs (*.ii), expected 1")
    if "gen_c" not in outputs:
        raise NotCacheable("cudafe++ writes no host file (--gen_c_file_name)")
    if "module_id" in outputs and "--gen_module_id_file" not in args:
        raise NotCacheable("cudafe++ reads a module id file instead of writing it")
    components = {
        "schema": STEP_KEY_SCHEMA,
        "tool": "cudafe++",
        "module_id": "pinned",  # its pid replaced (kbuild.nvcc.module_id); entries from before are not read
        "identity": identity,
        "args": kept,
        "input_sha256": _file_digest(inputs[0], tmp),
        "outputs": sorted(outputs),
    }
    return Step("cudafe++", components, outputs, {}, "host")


def ptxas_step(argv: tuple[str, ...], *, cwd: Path, tmp: str, identity: dict[str, Any],
               module_id: str | None = None) -> Step:
    """The :class:`Step` of one ``ptxas`` command (one ``*.ptx`` input, ``-o`` the cubin). With the unit's
    ``module_id`` (from its cicc step) and that id in the PTX, the key reads the PTX with the id as its
    placeholder, and the step relocates its cubin."""
    args = _arguments(argv)
    kept: list[str] = []
    inputs: list[Path] = []
    out: Path | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-o", "--output-file"):
            if i + 1 >= len(args):
                raise NotCacheable(f"ptxas's {a} has no value")
            out = cwd / args[i + 1]
            i += 2
            continue
        if a.startswith("--output-file="):
            out = cwd / a.split("=", 1)[1]
        elif not a.startswith("-") and a.endswith(".ptx"):
            inputs.append(cwd / a)
            kept.append("@INPUT@")
        else:
            kept.append(_norm(a, tmp))
        i += 1
    if len(inputs) != 1:
        raise NotCacheable(f"ptxas has {len(inputs)} PTX inputs, expected 1")
    if out is None:
        raise NotCacheable("ptxas writes no cubin (-o)")
    arch = next((a.split("=", 1)[1] for a in args if a.startswith("-arch=")),
                next((args[j + 1] for j, a in enumerate(args[:-1]) if a == "-arch"), "?"))
    relocate = module_id if module_id and module_id.encode() in inputs[0].read_bytes() else None
    components: dict[str, Any] = {
        "schema": STEP_KEY_SCHEMA,
        "tool": "ptxas",
        "identity": identity,
        "args": kept,
        "input_sha256": _file_digest(inputs[0], tmp, relocate),
    }
    if relocate:
        components["module_id_length"] = len(relocate)
    return Step("ptxas", components, {"cubin": out}, {}, arch, relocate)


__all__ = ["MODULE_ID_SEED", "TMP_PLACEHOLDER", "NotCacheable", "Step", "cicc_step", "cudafe_step", "module_id_placeholder",
           "ptxas_step"]
