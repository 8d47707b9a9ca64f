"""Live translation server: ``mmst-serve`` (WebSocket API + web page), per-stream sessions, and the
scheduler that batches the streams' compute per tick. See ``docs/serving.md``."""
