"""Helpers shared by the store tests (imported as a plain module: pytest puts this folder on sys.path)."""

from __future__ import annotations

import hashlib
import socket
import uuid

from kbuild.cache.store import Artefact


def unique() -> str:
    return uuid.uuid4().hex[:12]


def make_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def make_artefact(name: str = "k", size: int = 1000, **meta: object) -> Artefact:
    body = hashlib.sha256(name.encode()).digest()
    cubin = b"\x7fELF" + (body * (size // len(body) + 1))[: max(0, size - 4)]
    fields = {"kernel": name, "target": "sm_90", "tuned": False, "compile_seconds": 2.0, "tune_seconds": 0.0}
    fields.update(meta)
    return Artefact.create(key=make_key(name), cubin=cubin, meta=fields)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
