"""kbuild.tile: a tile language whose thread-value layouts are synthesised, emitted as Gluon (issue 20).

Owns the CuTe layout algebra (:mod:`~kbuild.tile.layout`), its bridge to Triton's linear layouts
(:mod:`~kbuild.tile.linear`), the tile front end (:mod:`~kbuild.tile.lang`), layout synthesis
(:mod:`~kbuild.tile.synth`) and Gluon emission (:mod:`~kbuild.tile.gluon`); for matrix products, the layouts an
mma fixes, shared swizzles and tile configurations (:mod:`~kbuild.tile.mma`), their pipelined Gluon emission
(:mod:`~kbuild.tile.gluon_mma`); for the int4 × fp16 GEMM, the weight packing derived from the operand layout
and its configurations (:mod:`~kbuild.tile.quant`) and its Gluon emission (:mod:`~kbuild.tile.gluon_quant`).
Importing it imports no Triton.
"""
