"""Workloads: what each request asks for (prompts, lengths), as pure code without network access.

``spec`` reads the run file's ``workload:`` section; ``plan`` turns it into one worker's requests
from ``lengths`` (distributions), ``maker``/``exact`` (prompts of exact token length, counted by
``tokenize_api`` over an injected transport or by ``local_tokenizer``), ``datasets``, ``prefix``
(shared prefixes) and ``conversation`` (multi-turn state).
"""
