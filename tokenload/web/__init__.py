"""tokenload's live web page: a Flask blueprint on Locust's web UI (``blueprint``), the series it
charts, sampled on the master (``live``), and its static JS/CSS (``static/``, no dependencies)."""
