"""`ModelFixes`: what one engine learns from refusals, shared by its commits."""

from __future__ import annotations

from types import SimpleNamespace

from workmem.nodes.model_fixes import INLINE_SCHEMA_FIX, ModelFixes

REFUSAL = "Unsupported parameter: 'temperature' is not supported with this model."


def test_a_request_sent_before_a_fix_was_learnt_is_told_of_it():
    fixes = ModelFixes()
    model = SimpleNamespace(temperature=0.3)
    sent_by_both = fixes.names()
    assert fixes.learn(REFUSAL, model, "refs") == "without_temperature"
    assert fixes.learn(REFUSAL, model, "refs") is None, "nothing new for the second refused request"
    assert fixes.since(sent_by_both) == "without_temperature", "but a fix it was sent without"
    assert fixes.since(fixes.names()) is None
    assert fixes.learn("schema keyword '$ref' is not supported", model, "refs") == INLINE_SCHEMA_FIX
    assert fixes.since(["without_temperature"]) == INLINE_SCHEMA_FIX
