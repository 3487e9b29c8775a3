"""The published JSON Schema (a data package inside the wheel)."""
