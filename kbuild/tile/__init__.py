"""kbuild.tile: a tile language whose thread-value layouts are synthesised, emitted as Gluon (issue 20).

Owns the CuTe layout algebra (:mod:`~kbuild.tile.layout`), its bridge to Triton's linear layouts
(:mod:`~kbuild.tile.linear`), the tile front end (:mod:`~kbuild.tile.lang`), layout synthesis
(:mod:`~kbuild.tile.synth`) and Gluon emission (:mod:`~kbuild.tile.gluon`). Importing it imports no Triton.
"""
