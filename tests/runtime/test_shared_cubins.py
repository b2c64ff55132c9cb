"""One cubin under several keys (issue 34): two specialisations may compile to the same bytes (an argument's
divisibility the code never uses, autotune configurations that differ only in what the code does not read). The
build files the cubin under each key, every entry listing the others in ``shares_cubin_with``; the run time trusts
such a group only when every entry lists exactly the others, so one edited or copied entry is still refused."""

from __future__ import annotations

from typing import Any

import pytest

from kbuild.build.package_data import mark_shared_cubins
from kbuild.runtime.verify import pairing_conflicts


def _entry(sha: str, shares: list[str] | None = None) -> dict[str, Any]:
    return {"cubin_sha256": sha, **({"shares_cubin_with": shares} if shares is not None else {})}


def test_the_build_marks_each_entry_of_a_shared_cubin_with_the_others() -> None:
    marked = dict(mark_shared_cubins([("k1", _entry("a")), ("k2", _entry("a")), ("k3", _entry("b")),
                                      ("k4", _entry("a"))]))
    assert marked["k1"]["shares_cubin_with"] == ["k2", "k4"] and marked["k4"]["shares_cubin_with"] == ["k1", "k2"]
    assert "shares_cubin_with" not in marked["k3"]
    assert pairing_conflicts(marked) == {}


@pytest.mark.hostile(fault="an index entry pointed at another entry's cubin, declaring the share on one side only",
                     outcome="clean error")
@pytest.mark.parametrize("entries", [
    {"k1": _entry("a"), "k2": _entry("a")},                                    # no declaration: the old edit
    {"k1": _entry("a", ["k2"]), "k2": _entry("a")},                            # declared on one side only
    {"k1": _entry("a", ["k2"]), "k2": _entry("a", ["k1"]), "k3": _entry("a")},  # a third entry joins the cubin
    {"k1": _entry("a", ["k2", "k9"]), "k2": _entry("a", ["k1"])},              # lists a key that does not share it
], ids=["undeclared", "one-sided", "third-joins", "wrong-list"])
def test_a_share_not_declared_by_every_entry_refuses_the_whole_group(entries: dict[str, Any]) -> None:
    refused = pairing_conflicts(entries)
    assert set(refused) == {k for k, e in entries.items() if e["cubin_sha256"] == "a"}
    assert all("the index contradicts itself" in why for why in refused.values())
