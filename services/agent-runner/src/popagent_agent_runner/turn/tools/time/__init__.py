"""Time tools."""
