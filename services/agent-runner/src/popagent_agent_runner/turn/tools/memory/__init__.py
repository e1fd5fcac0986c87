"""Long-term memory tools."""
