from services.hosting.runtime import build_runtime


def test_consolidation_chain_is_separate_when_configured(settings, database):
    settings.consolidation_providers = ["openai_compatible", "offline"]
    settings.openai_base_url = "http://127.0.0.1:9/v1"  # never called here; a local server needs no key
    runtime = build_runtime(settings)
    assert [p.name for p in runtime.llm.providers] == ["offline"]
    assert [p.name for p in runtime.consolidation_llm.providers] == ["openai_compatible", "offline"]
    assert runtime.consolidation_llm.on_failure is runtime.record_failure


def test_consolidation_chain_defaults_to_the_reply_chain(settings, database):
    runtime = build_runtime(settings)
    assert runtime.consolidation_llm is runtime.llm
