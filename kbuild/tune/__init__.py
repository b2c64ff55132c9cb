"""kbuild.tune: the bounded two-level search (launch configuration, then SASS schedule and control codes).

:mod:`.two_level` runs :mod:`.level1` (the configuration space on the GPU) and :mod:`.api` (the SASS
search over the gym env of :mod:`.env`, with the searchers of :mod:`.search` and the policy of
:mod:`.policy`), judged by :mod:`.accept`; :mod:`.report_html` explains a result. It drives
:mod:`kbuild.sass` and the measurement backends in :mod:`kbuild.tune.measure`, and returns result
objects. It never touches stores. What to spend and how to search comes whole, as one
:class:`kbuild.settings.model.TuneRequest` made from the settings.
"""

#: Bumped whenever a change to the tuner can change which schedule it picks; part of every key.
TUNER_VERSION = 2
# 2: two levels (a configuration space ships its best configuration), greedy alone by default, edit kinds.
