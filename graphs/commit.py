"""The commit graph, wired top to bottom like its diagram. No logic lives here.

    START ─(valid: the Studio input checked, Studio graph only)→ take_lease → slice_turns …
    START → slice_turns ─(nothing_to_cover)→ report → END
              └(covered)→ load_memory → generate ─(answered)→ validate
    generate ─(retry)→ generate                                        (transport errors, 3 attempts)
    generate ─(exhausted)→ extractive_fallback
    validate ─(valid)→ guard → merge ─(next_chunk)→ generate
                                    └─(done)→ persist → report → END
    validate ─(malformed)→ recover ─(recovered)→ guard
    validate / recover ─(no_usable_call)→ create_retry → generate      (once per chunk)
    validate / recover ─(fallback: retry used, or model error)→ extractive_fallback → guard

Every node is wrapped by `redacted`: an exception escaping it reaches LangGraph redacted.
"""

from __future__ import annotations

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from workmem.nodes.context import CommitContext, redacted
from workmem.nodes.create_retry import create_retry
from workmem.nodes.extractive_fallback import extractive_fallback
from workmem.nodes.generate import generate
from workmem.nodes.guards import guard
from workmem.nodes.load_memory import load_memory
from workmem.nodes.merge import merge
from workmem.nodes.persist import persist
from workmem.nodes.recover import recover
from workmem.nodes.report import report
from workmem.nodes.routing import (
    route_after_generate,
    route_after_merge,
    route_after_recover,
    route_after_slice,
    route_after_take_lease,
    route_after_validate,
)
from workmem.nodes.slice_turns import slice_turns
from workmem.nodes.studio_input import check_studio_input
from workmem.nodes.studio_lease import release_lease, take_lease
from workmem.nodes.validate import validate
from workmem.state.commit_state import CommitInput, CommitOutput, CommitState, StudioInput


def build_commit_graph(*, with_lease: bool = False) -> StateGraph:
    """The uncompiled commit graph (nodes, edges and every fallback edge with its label).

    `with_lease=True` adds what the engine otherwise does around a run (Studio runs need it):
    `take_lease` (input messages, lease, archive id, task row) first and `release_lease` last.
    """
    builder = StateGraph(CommitState, context_schema=CommitContext,
                         input_schema=StudioInput if with_lease else CommitInput, output_schema=CommitOutput)

    builder.add_node("slice_turns", redacted(slice_turns))
    builder.add_node("load_memory", redacted(load_memory))
    builder.add_node("generate", redacted(generate))
    builder.add_node("validate", redacted(validate))
    builder.add_node("recover", redacted(recover))
    builder.add_node("create_retry", redacted(create_retry))
    builder.add_node("extractive_fallback", redacted(extractive_fallback))
    builder.add_node("guard", redacted(guard))
    builder.add_node("merge", redacted(merge))
    builder.add_node("persist", redacted(persist))
    builder.add_node("report", redacted(report))

    if with_lease:
        builder.add_node("take_lease", redacted(take_lease))
        builder.add_node("release_lease", redacted(release_lease))
        builder.add_conditional_edges(START, check_studio_input, {"valid": "take_lease"})
        builder.add_conditional_edges("take_lease", route_after_take_lease, {"leased": "slice_turns", "busy": END})
    else:
        builder.add_edge(START, "slice_turns")
    builder.add_conditional_edges("slice_turns", route_after_slice,
                                  {"covered": "load_memory", "nothing_to_cover": "report"})
    builder.add_edge("load_memory", "generate")
    builder.add_conditional_edges("generate", route_after_generate, {
        "answered": "validate",
        "retry": "generate",
        "exhausted": "extractive_fallback",
    })
    builder.add_conditional_edges("validate", route_after_validate, {
        "valid": "guard",
        "malformed": "recover",
        "no_usable_call": "create_retry",
        "fallback": "extractive_fallback",
    })
    builder.add_conditional_edges("recover", route_after_recover, {
        "recovered": "guard",
        "no_usable_call": "create_retry",
        "fallback": "extractive_fallback",
    })
    builder.add_edge("create_retry", "generate")
    builder.add_edge("extractive_fallback", "guard")
    builder.add_edge("guard", "merge")
    builder.add_conditional_edges("merge", route_after_merge, {"next_chunk": "generate", "done": "persist"})
    builder.add_edge("persist", "report")
    if with_lease:
        builder.add_edge("report", "release_lease")
        builder.add_edge("release_lease", END)
    else:
        builder.add_edge("report", END)
    return builder


def compile_commit_graph(checkpointer: BaseCheckpointSaver | None = None) -> CompiledStateGraph:
    """Compile the commit graph the engine runs, checkpointed by `checkpointer` when given."""
    return build_commit_graph().compile(checkpointer=checkpointer, name="workmem_commit")


# What `langgraph dev` serves (studio.json): no checkpointer of its own (the server brings
# studio.sqlite), and the lease taken inside the run like any engine commit.
graph = build_commit_graph(with_lease=True).compile(name="workmem_commit")
