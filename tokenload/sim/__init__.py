"""``tokenload sim``: a vLLM-compatible emulator whose step times come from a roofline model of
the hardware and whose scheduler saturates the way vLLM's does.

Layout, one concept per module: ``profile`` (GPU + model numbers), ``costmodel`` (time of a step),
``kvcache`` (paged blocks, prefix caching), ``tokenizer`` (byte-level ids, streaming text),
``scheduler`` (vLLM V1 / V0 policies), ``engine`` (the step loop a driver calls), ``metrics``
(vLLM's /metrics families), ``virtual`` (a driver in simulated time).
"""
