"""Checks of k8s/ and the Dockerfile that need no cluster."""
