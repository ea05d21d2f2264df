"""The Locust side of tokenload: user classes, command-line options and the event wiring."""
