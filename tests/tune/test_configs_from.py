"""``kbuild tune --configs-from FILE`` reads a ``kbuild bench`` JSON record through the one safe JSON loader and
checks its shape: anything else is one UsageError naming the file and the key (issue 13)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbuild.commands.tune import autotuned_configs
from kbuild.errors import UsageError

GOOD = {"kernels": [{"name": "softmax", "best_label": "BLOCK=1024,w4,s3"}, {"name": "rmsnorm"}]}


def test_a_bench_record_gives_each_kernels_kept_configuration(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(GOOD))
    assert autotuned_configs(str(path)) == {"softmax": "BLOCK=1024,w4,s3"}


@pytest.mark.hostile(fault="malformed JSON", outcome="clean error")
@pytest.mark.parametrize(("text", "key"), [
    pytest.param("[" * 100_000 + "]" * 100_000, "nested deeper", id="100,000 deep"),
    pytest.param('{"kernels": [{"name": 5, "best_label": "x"}]}', "kernels[0].name", id="int name"),
    pytest.param('{"kernels": [{"name": "a", "best_label": ["x"]}]}', "kernels[0].best_label", id="list label"),
    pytest.param('{"kernels": [{"name": ["a"], "best_label": "x"}]}', "kernels[0].name", id="list name"),
    pytest.param('{"kernels": {"name": "a"}}', "kernels: expected a list", id="object kernels"),
    pytest.param('{"kernels": [3]}', "kernels[0]: expected an object", id="number kernel"),
    pytest.param('{"kernels": [{"name": "a", "best_label": NaN}]}', "NaN is not a JSON number", id="NaN"),
    pytest.param("[]", "kernels: expected a list", id="array"),
])
def test_a_bad_record_is_one_usage_error_naming_the_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bench.json"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        autotuned_configs(str(path))
    message = str(err.value)
    assert message.startswith(f"--configs-from: {path}: ") and key in message and "\n" not in message
    assert err.value.exit_code == 2
