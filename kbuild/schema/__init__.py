"""The JSON schema of ``[tool.kbuild]``, generated from :mod:`kbuild.config` (``kbuild.schema.json``).

Regenerate with ``python -m kbuild.schema > kbuild/schema/kbuild.schema.json``; a test fails when
the committed file drifts from the model.
"""
