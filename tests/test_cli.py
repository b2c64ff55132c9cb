"""The CLI end to end, in-process: `kbuild compile --json`, `kbuild explain --json`, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import assert_clean_error, tree_digest

from kbuild.cli import main
from kbuild.settings.variables import Override


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def store_files(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*") if p.is_file()) if store.exists() else []


def test_compile_json_then_all_hits(example_project: Path, tmp_path: Path, capsys, kbuild_env: Override):
    store = tmp_path / "store"
    kbuild_env.set(store=store)
    cfg = str(example_project / "pyproject.toml")
    code, out, _ = run(capsys, "compile", "--config", cfg, "--json")
    assert code == 0
    rows = json.loads(out)
    assert {(r["kernel"], r["target"]) for r in rows} == {
        (k, t) for k in ("matmul_leaky_relu", "softmax", "layernorm") for t in ("sm_80", "sm_90")}
    for r in rows:
        assert set(r) >= {"kernel", "target", "key", "cubin_sha256", "cubin_bytes", "tuned"}
        assert r["tuned"] is False and r["store_hit"] is False
        assert len(r["key"]) == 64 and r["cubin_bytes"] > 1000
        assert r["status"] == f"untuned: no {r['target']} GPU on this machine"
    code, out2, _ = run(capsys, "compile", "--config", cfg, "--json")
    again = json.loads(out2)
    assert all(r["store_hit"] for r in again)
    assert [(r["key"], r["cubin_sha256"]) for r in again] == [(r["key"], r["cubin_sha256"]) for r in rows]


def test_compile_table_and_out_dir(example_project: Path, tmp_path: Path, capsys, kbuild_env: Override):
    kbuild_env.set(store=tmp_path / "store")
    code, _, err = run(capsys, "compile", "--config", str(example_project / "pyproject.toml"), "--targets", "sm_90",
                       "--kernel", "softmax", "--out", str(tmp_path / "cubins"), "--no-progress")
    assert code == 0
    assert "softmax" in err and "sm_90" in err and "untuned: no sm_90 GPU on this machine" in err
    assert (tmp_path / "cubins" / "softmax.sm_90.cubin").read_bytes()[:4] == b"\x7fELF"


def test_explain_json_lists_components(example_project: Path, tmp_path: Path, capsys, kbuild_env: Override):
    kbuild_env.set(store=tmp_path / "store")
    cfg = str(example_project / "pyproject.toml")
    code, out, _ = run(capsys, "explain", "softmax", "--config", cfg, "--target", "sm_90", "--json")
    assert code == 0
    doc = json.loads(out)
    comp = doc["components"]
    assert comp["target"] == {"arch": "sm_90a", "cc": 90}
    assert comp["kernel"]["constexprs"] == {"BLOCK": 1024}
    assert comp["kernel"]["num_warps"] == 4 and comp["kernel"]["source_hash"]
    assert comp["compiler"]["triton"].startswith("3.6") and comp["compiler"]["ptxas"]
    assert doc["tuner"]["budget"] == {"evaluations": 200, "seconds": 600.0}
    assert doc["in_store"] == {"baseline": False, "tuned": False}
    run(capsys, "compile", "--config", cfg, "--targets", "sm_90", "--kernel", "softmax", "--json")
    code, out, _ = run(capsys, "explain", "softmax", "--config", cfg, "--target", "sm_90", "--json")
    assert json.loads(out)["in_store"] == {"baseline": True, "tuned": False}


@pytest.mark.parametrize(("old", "new", "fragment"), [
    ('num_warps = 4\n\n[[tool.kbuild.kernels]]\nname = "layernorm"', 'num_warps = "4"\n\n[[tool.kbuild.kernels]]\nname = "layernorm"',
     "[tool.kbuild.kernels][1].num_warps: expected an integer"),
    ('n_cols = "i32"', 'n_cols = "int"', "[tool.kbuild.kernels][1].signature.n_cols: 'int' is not a Triton type"),
    ('source = "kbx_demo.kernels:layernorm"', 'source = "kbx_demo.kernel:layernorm"',
     "[tool.kbuild.kernels][2].source: cannot import module 'kbx_demo.kernel'"),
    ('source = "kbx_demo.kernels:layernorm"', 'source = "kbx_demo.kernels:missing"',
     "[tool.kbuild.kernels][2].source: module 'kbx_demo.kernels' has no attribute 'missing'"),
    ('source = "kbx_demo.kernels:layernorm"', 'source = "kbx_demo.kernels:leaky_relu"',
     "[tool.kbuild.kernels][2].signature.x_ptr: leaky_relu() has no parameter 'x_ptr'; its parameters: x, SLOPE"),
    ('targets = ["sm_80", "sm_90"]', 'targets = ["sm_80", "sm_91"]', "targets[1]: unsupported target 'sm_91'"),
    ('tune = "auto"', 'tune = "auto"\ntuning = 1', "tuning: unknown key; did you mean 'tune'?"),
])
def test_bad_input_exits_2_and_writes_nothing(example_project: Path, tmp_path: Path, capsys, kbuild_env: Override, old, new,
                                              fragment):
    store = tmp_path / "store"
    kbuild_env.set(store=store)
    cfg = example_project / "pyproject.toml"
    text = cfg.read_text()
    assert text.count(old) == 1
    cfg.write_text(text.replace(old, new))
    for name in [m for m in sys.modules if m.startswith("kbx_demo")]:
        del sys.modules[name]
    code, out, err = run(capsys, "compile", "--config", str(cfg), "--json")
    assert code == 2, err
    assert out == ""
    assert err.startswith(f"error: {cfg}: "), err
    assert fragment in err
    assert "Traceback" not in err
    # The first kernels were valid, but nothing at all reached the store: it was not even created.
    assert not store.exists()


def test_missing_config_and_unknown_kernel(tmp_path: Path, capsys, example_project: Path):
    code, _, err = run(capsys, "compile", "--config", str(tmp_path / "nope.toml"))
    assert code == 2 and "nope.toml: (file): no such file" in err
    code, _, err = run(capsys, "explain", "softmx", "--config", str(example_project / "pyproject.toml"),
                       "--target", "sm_90")
    assert code == 2 and "no kernel named 'softmx'" in err and "did you mean 'softmax'" in err


def test_triton_missing_is_a_clear_error(example_project: Path, tmp_path: Path):
    # A real subprocess in which `import triton` fails.
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'triton' or name.startswith('triton.'):\n"
        "            raise ModuleNotFoundError(\"No module named 'triton'\", name='triton')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from kbuild.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, "compile", "--config", str(example_project / "pyproject.toml")],
                          capture_output=True, text=True, env={"KBUILD_STORE": str(tmp_path / "s"), "PATH": "/usr/bin"})
    assert proc.returncode == 2, proc.stderr
    assert "Triton is not installed" in proc.stderr
    assert "Traceback" not in proc.stderr


# Hostile configurations (issue 13): one `error:` line naming the file (or variable) and the key, exit 2,
# and nothing written: not the store (it is not even created), not the project.
def hostile(fault: str, old: str | bytes | None, new: str | bytes | None, env: dict[str, str], key: str, *,
            id: str) -> Any:
    return pytest.param(old, new, env, key, id=id, marks=pytest.mark.hostile(fault=fault, outcome="clean error"))


HOSTILE_CONFIGS = [
    hostile("non-finite number", "seconds = 600", "seconds = nan", {}, "budget.seconds", id="seconds=nan"),
    hostile("non-finite number", "SLOPE = 0.01", "SLOPE = inf", {}, "[tool.kbuild.kernels][0].constexprs.SLOPE",
            id="constexpr=inf"),
    hostile("non-finite number", None, None, {"budget.seconds": "nan"}, "KBUILD_BUDGET_SECONDS",
            id="KBUILD_BUDGET_SECONDS=nan"),
    hostile("unreadable config", b'tune = "auto"', b'tune = "auto"  # caf\xe9', {}, "(file): not UTF-8",
            id="latin-1"),
    hostile("wrong config shape", None, "tool = 1\n", {}, "tool: expected a table", id="tool=1"),
    hostile("wrong config shape", "seconds = 600 }", "seconds = 600 }\nremotes = { url = \"http://localhost:1\" }",
            {}, "remotes: expected an array", id="remotes=table"),
    hostile("empty targets", 'targets = ["sm_80", "sm_90"]', "targets = []", {}, "targets: no targets",
            id="targets=[]"),
    # Without the fix, this store is the project directory: KBUILD_STORE="" counts as unset and does not hide it.
    hostile("bad store path", 'tune = "auto"', 'tune = "auto"\nstore = ""', {"store": ""}, "store: empty path",
            id="store=''"),
    hostile("non-ASCII target", 'targets = ["sm_80", "sm_90"]', 'targets = ["sm_80", "sm_９０"]', {},
            "targets[1]: 'sm_９０' is not a GPU target: it contains the non-ASCII character", id="targets=sm_fullwidth90"),
]


def hostile_compile(example_project: Path, tmp_path: Path, capsys, kbuild_env: Override, old: str | bytes | None,
                    new: str | bytes | None, env: dict[str, str]) -> tuple[Path, Path, int, str, str]:
    """`kbuild compile --json` on the example project with ``old`` replaced by ``new`` in its pyproject.toml
    (``new`` is the whole file when ``old`` is None) and the settings ``env`` set through their variables; asserts
    that neither the store nor the project changed."""
    store = tmp_path / "store"
    kbuild_env.set(store=store)  # unless env says otherwise
    kbuild_env.set(env)
    cfg = example_project / "pyproject.toml"
    if old is None and new is not None:  # the whole file
        cfg.write_bytes(new.encode() if isinstance(new, str) else new)
    elif old is not None and new is not None:
        data = cfg.read_bytes()
        old_b = old.encode() if isinstance(old, str) else old
        new_b = new.encode() if isinstance(new, str) else new
        assert data.count(old_b) == 1
        cfg.write_bytes(data.replace(old_b, new_b))
    before = tree_digest(example_project)
    code, out, err = run(capsys, "compile", "--config", str(cfg), "--json")
    assert out == ""
    assert not store.exists()
    assert tree_digest(example_project) == before
    return cfg, store, code, out, err


@pytest.mark.parametrize(("old", "new", "env", "key"), HOSTILE_CONFIGS)
def test_hostile_config_exits_2_and_writes_nothing(example_project: Path, tmp_path: Path, capsys, kbuild_env: Override,
                                                   old, new, env, key):
    cfg, _, code, _, err = hostile_compile(example_project, tmp_path, capsys, kbuild_env, old, new, env)
    assert_clean_error(code, err, names=[key] if key.startswith("KBUILD_") else [str(cfg), key])
    assert err.count("\n") == 1, err


def test_a_verb_that_does_not_import_is_not_silently_dropped(monkeypatch):
    """A packaging error (a verb module missing from the wheel) must surface, not hide the verb."""
    import kbuild.cli as cli

    monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "kbuild.commands.not_packaged"])
    with pytest.raises(ModuleNotFoundError, match="not_packaged"):
        cli.build_parser()


def test_every_verb_is_in_the_help():
    import kbuild.cli as cli

    help_text = cli.build_parser().format_help()
    for verb in ("compile", "explain", "tune", "prewarm", "emit", "inspect", "verify-wheel", "lock", "package-data",
                 "cache", "sass", "bench"):
        assert verb in help_text, verb


@pytest.mark.hostile(fault="closed output pipe", outcome="clean error")
def test_a_reader_that_closes_stdout_early_stops_kbuild_quietly_with_sigpipes_status() -> None:
    """`kbuild ... --json | head` : the reader leaves after a few bytes; kbuild stops at its next write with the
    status a tool killed by SIGPIPE has (141) and no traceback (it printed one before)."""
    cubin = Path(__file__).parent / "fixtures" / "sass" / "attention_fwd.sm90.cubin"
    proc = subprocess.Popen([sys.executable, "-m", "kbuild", "sass", "show", "--json", str(cubin)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(16)  # the reader takes a little, then goes away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err
