"""Metrics: the one definition of every latency metric, the mergeable histogram, failure classes
and per-request records. Pure: no Locust, gevent or I/O imports here."""
