"""A seeded discrete-event simulation of Forum's replica groups (issue 30).

One heap of events (:mod:`.engine`), no SimPy. A world (:mod:`.world`) is G
groups of R node processes (:mod:`.node`), producers and workers
(:mod:`.actors`), and the Lens's Redis masters with the depth directory
(:mod:`.lens`), each process a CPU queue whose service times are calibrated
(:mod:`.calibration`) against this repository's measured single-cluster runs
(``bench/scaling_bench.py``). Every run's history is judged by the real
checker, :func:`forum.deploy.history.check`. The entry point is
``bench/simulate_bench.py``; the model and its figures are in
``docs/scaling-simulation.md``.
"""
