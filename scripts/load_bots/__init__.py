"""The load test's bot participants: HTTP only, nothing imported from the platform (scripts/load_test.py)."""
