"""Deprecated alias of `workmem.graphs.demo.agent` (the demo agent moved there); kept for one release so existing
`langgraph.json` files that name `workmem.graphs.demo_agent:agent` still load."""

from __future__ import annotations

import warnings

from workmem.graphs.demo.agent import DEMO_SESSION, agent, build_demo_agent, demo_engine

warnings.warn("workmem.graphs.demo_agent moved to workmem.graphs.demo.agent; the old path goes in the next release",
              DeprecationWarning, stacklevel=2)

__all__ = ["DEMO_SESSION", "agent", "build_demo_agent", "demo_engine"]
