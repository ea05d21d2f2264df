"""The streaming client: SSE decoding, OpenAI chunk interpretation and the gevent HTTP stream."""
