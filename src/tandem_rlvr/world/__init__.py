"""world."""
