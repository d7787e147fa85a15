"""The load test's bot participants: HTTP only, nothing imported from the platform (scripts/load_test.py).

``load`` runs a class (``run``); ``bots`` are the participants and what they saw (``Bot``, ``Results``), each with
its ``client``; ``servers`` starts the loopback model and the platform; ``measure`` counts what was stored and
reports; ``stack``, ``ports`` and ``hosts_checks`` are the two-host run's (scripts/two_hosts.py).
"""
