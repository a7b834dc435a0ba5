"""``kvtui tune``: search the engine settings a profile's ``[tune]`` names for the highest capacity edge.

:mod:`tui.tune.candidates` makes the candidates (the grid, and the profile's own configuration),
:mod:`tui.tune.trial` measures one candidate at one rung (a recorded sweep: the sweep's own edge rule),
:mod:`tui.tune.executors` runs trials in local processes or on Ray, :mod:`tui.tune.search` is the
successive-halving search and ``tune.csv``, :mod:`tui.tune.view` the terminal table, chart and progress.
"""
