"""The memory conditions: one module per condition, registered in ``registry``; see docs/architecture.md."""
