"""Simulation and validation, outside the training runtime.

* :mod:`mmst.simulation.toy`: a small synthetic regression task for the distributed modes;
* :mod:`mmst.simulation.run`: ``python -m mmst.simulation.run``, the stand-alone (torchrun) runner of
  the distributed modes on that task, used by the tests and ``bench/bench_stragglers.py``;
* :mod:`mmst.simulation.step_time`: Monte-Carlo and Blom predictions of synchronous step time.
"""
