"""Reports of a run directory: report.md, report.html (self-contained) and parquet tables, SLO
and capacity planning, and the maths of comparing two runs (``tokenload compare``).

Layout: ``rundir`` reads, ``writer`` writes; everything between is pure: ``frames`` (parquet
tables), ``capacity`` (SLO, capacity, replicas), ``model`` (what a report says), ``tables``,
``charts`` and ``svg`` (what it shows), ``markdown`` and ``html`` (how), ``compare_math``.
"""

from tokenload.report.capacity import SLO, parse_slo
from tokenload.report.rundir import ReportError
from tokenload.report.writer import ReportPaths, write_reports

__all__ = ["SLO", "ReportError", "ReportPaths", "parse_slo", "write_reports"]
