"""Probe recall (issue 27, part 3): probe personas (``personas``) and their run through the chat path with the
measure the lab reports (``recall``)."""
