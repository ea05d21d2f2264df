"""tokenload: a Locust-based load generator for LLM inference servers.

The package is laid out as the data flows: ``client`` (request -> stream), ``metrics``
(record -> aggregate), ``loadgen`` (the Locust wiring), ``sim`` and ``mock`` (targets).
"""

__version__ = "0.1.0"
