"""The server's side of a run: its Prometheus /metrics, read into one vocabulary, and the window
maths that turns scraped series into per-step figures."""
