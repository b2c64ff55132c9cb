"""kbuild.templates: C launcher and header templates, runtime helpers and ``kbuild init``
project scaffolds. Data files only; rendered by kbuild.emit."""
