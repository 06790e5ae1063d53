"""Network edge and call orchestration."""
