"""kbuild.settings: the settings model, the one place that reads ``[tool.kbuild]`` and ``KBUILD_*`` variables.

Module by module, from the ground up:

* :mod:`.environ` — the process environment: kbuild's one reader and writer of ``os.environ``, and the one
  string-to-bool rule;
* :mod:`.fields` — typed fields: a field's metadata (its variable, whether it is in the key, its rule), and how a
  TOML value or a string becomes the field's type, with errors naming the file and the dotted key;
* :mod:`.ray_address` — the form of a Ray address (``[tool.kbuild.prewarm] address``);
* :mod:`.model` — the model: :class:`~.model.Settings` and its tables, one frozen dataclass each, every field with
  a docstring;
* :mod:`.variables` — the ``KBUILD_*`` variables: one setting read from its variable alone
  (:func:`~.variables.env_setting`), every variable the model knows, and :class:`~.variables.Override`, settings
  set through their variables for a block (the tests' isolation);
* :mod:`.sources` — where settings come from, each source beating the ones before it: defaults,
  ``pyproject.toml``, PEP 517 config settings, the environment, command-line flags
  (:func:`~.sources.load_settings`).

The kernel declarations under ``[[tool.kbuild.kernels]]`` have their own grammar (:mod:`kbuild.declarations`);
the JSON schema is generated from the model (:mod:`kbuild.schema`). Nothing else in kbuild touches ``os.environ``.
"""
