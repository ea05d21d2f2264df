"""Workloads: what each request asks for (prompts, lengths)."""
