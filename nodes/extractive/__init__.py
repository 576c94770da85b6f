"""The deterministic offline model: a heuristic extractor that answers the commit prompt with a tool call."""
