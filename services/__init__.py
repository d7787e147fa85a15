"""The study's logic, below the routes and above ``database``, in domain packages. Each package may import
only the packages on the floors below it (its ``__init__`` says which; ``pyproject.toml`` [tool.layers] holds
the rules as data and ``scripts/check_layers.py`` checks them):

1. ``platform`` (clock, errors, leases, background work, failure log) and ``text`` (languages, keywords, cells);
2. ``llm``: chat models, the fallback chain, embeddings and providers;
3. ``recall``: retriever, relevance, forgetting curve, salience (pure maths);
4. ``study``: the definition, tasks and timer, assignment, questionnaires;
5. ``memory``: the conditions, consolidation, the profile;
6. ``participants`` (accounts, panel, rights, erasure, payments) and ``hosting`` (the runtime, serving);
7. ``chat``: a message and its reply;
8. ``operations``: the admin's monitor and the scheduled jobs;
9. ``reporting``: the export and its codebook, charts, the report;
10. ``research``: offline tooling (benchmarks, calibration, bots, pre-flight). Nothing else imports it but the CLI
    and scripts/.

docs/architecture.md draws it.
"""
