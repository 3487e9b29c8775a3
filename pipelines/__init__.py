"""Shipped example pipelines (a data package inside the wheel)."""
