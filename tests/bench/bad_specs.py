"""Bench specs for the validation tests: one good, several broken in the ways users break them."""

from __future__ import annotations

import dataclasses
from typing import Any

from kbuild.bench.kernels.softmax import softmax
from kbuild.bench.spec import BenchSpec


def good(small: bool = False) -> BenchSpec:
    return softmax(small=True)


def no_outputs() -> BenchSpec:
    return dataclasses.replace(softmax(small=True), outputs={})


def output_not_a_pointer() -> BenchSpec:
    return dataclasses.replace(softmax(small=True), outputs={"n_cols": None})


def missing_param() -> BenchSpec:
    s = softmax(small=True)
    return dataclasses.replace(s, signature={k: v for k, v in s.signature.items() if k != "n_cols"})


def bad_type() -> BenchSpec:
    s = softmax(small=True)
    return dataclasses.replace(s, signature={**s.signature, "n_cols": "int32"})


def empty_space() -> BenchSpec:
    return dataclasses.replace(softmax(small=True), configs=[])


def mismatched_shapes() -> BenchSpec:
    s = softmax(small=True)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        x = s.make_inputs(seed, device)
        x["y_ptr"] = x["y_ptr"][:, :256].contiguous()
        return x

    return dataclasses.replace(s, make_inputs=make_inputs)


def zeros() -> BenchSpec:
    s = softmax(small=True)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        x = s.make_inputs(seed, device)
        x["x_ptr"].zero_()
        return x

    return dataclasses.replace(s, make_inputs=make_inputs)


def wrong_dtype() -> BenchSpec:
    s = softmax(small=True)

    def make_inputs(seed: int, device: Any) -> dict[str, Any]:
        x = s.make_inputs(seed, device)
        x["x_ptr"] = x["x_ptr"].float()
        return x

    return dataclasses.replace(s, make_inputs=make_inputs)


def extra_input() -> BenchSpec:
    s = softmax(small=True)
    return dataclasses.replace(s, make_inputs=lambda seed, device: {**s.make_inputs(seed, device), "bogus": 1})


def raises() -> BenchSpec:
    raise RuntimeError("boom")


def not_a_spec() -> int:
    return 3


NOT_CALLABLE = 5
