"""Reports of a run directory: report.md, report.html (self-contained) and parquet tables, SLO
and capacity planning, and the maths of comparing two runs (``tokenload compare``).

Layout: ``rundir`` reads, ``writer`` writes; everything between is pure: ``frames`` (parquet
tables), ``capacity`` (SLO, capacity, replicas), ``model`` (what a report says), ``tables``,
``charts`` and ``svg`` (what it shows), ``markdown`` and ``html`` (how), ``compare_math``.

Nothing is imported here: ``tokenload.report.capacity`` and the other pure modules load without
pandas or pyarrow (``writer`` alone needs them).
"""
