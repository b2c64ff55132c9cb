"""A spec module that fails to import."""

import kbuild_no_such_module  # noqa: F401
