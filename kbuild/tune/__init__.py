"""kbuild.tune: bounded search over SASS schedules (gym env, MaskablePPO, search baselines).

It drives :mod:`kbuild.sass` and the measurement backends in :mod:`kbuild.tune.measure`, and
returns a result object. It never touches stores.
"""

#: Bumped whenever a change to the tuner can change which schedule it picks; part of every key.
TUNER_VERSION = 1
