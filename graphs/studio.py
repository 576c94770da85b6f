"""The checkpointer `langgraph dev --config studio.json` persists Studio runs in: `<root>/studio.sqlite`.

The graphs it serves are `graphs/commit.py:graph` (the commit graph with its lease nodes) and
`graphs/demo/agent.py:agent`. Unlike the engine's checkpoints, a Studio run's *input* is stored here too
(that is how the server keeps runs), so messages pasted into the commit graph's input panel are in
this file; the commit itself still never writes message bodies into its state.
"""

from __future__ import annotations

from workmem.state.storage import studio_checkpointer as checkpointer

__all__ = ["checkpointer"]
