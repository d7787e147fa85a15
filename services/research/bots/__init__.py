"""The bot participants of the manipulation check (``services.research.simulation``, the pre-flight and
``scripts/simulate_participants.py``): the personas (``personas``) and the HTTP client with the bots
(``client``). They speak HTTP only and import nothing from ``services``; scripts/check_layers.py refuses
any import of ``services`` here except this package's own modules.

Public names: ``personas`` (``FACTS``, ``SCRIPTS``, ``SPECIFICS``, ``facts_in``, ``context_facts``),
``client`` (``HttpClient``, ``ApiError``, ``Bot``, ``Admin``, ``enrol``, ``run_bots``, ``server_facts``).
"""
