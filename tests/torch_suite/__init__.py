"""torch's own distributed test suite (``_DistTestBase``) run against the "zccl" backend.

``run_suite.py`` is the per-rank program (under ``mpirun``), ``driver.py`` launches it in
batches and merges the per-rank results, ``skips.py`` lists what is skipped and why,
``gates.py`` adapts torch's backend-name gates, ``subset.py`` is the pytest subset.
"""
