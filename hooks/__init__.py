"""kbuild.hooks: build-system integration.

Owns the orchestration specs → compile → key → store → (tune) → emit, and the adapters that
run it from builds (PEP 517 backend wrapper, scikit-build-core entry points, setuptools
plugin). This is the only layer that knows all the others.
"""
