"""What a node says about itself: its log lines, its printed lines, its counters.

``node_logging`` (absl's format, level and files, as the launching script set them),
``labelled_output`` (``[label/index]`` before what node threads print, ``local_mt``) and
``node_metrics`` (calls, latency, memory, CPU, read when the launcher asks).

May import: ``node_side.runtime``, ``courier`` and below. Nothing else of ``node_side``
imports the other way round, so these stay leaves a node process loads as it starts.
"""
