"""A fixed-schedule OpenAI-compatible streaming server with ground truth and fault injection."""
