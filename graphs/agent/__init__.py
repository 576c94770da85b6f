"""The LangChain integration: the middleware, the alignment of an agent's state, the archive tools, `commit_node`."""
