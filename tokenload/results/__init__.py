"""The run directory: where a run's records and summaries land (``reports/<run-id>/``)."""
