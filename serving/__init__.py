"""Ray Serve wiring: the HTTP API ingress (and, later, the LLM, extractor and embedder deployments)."""
