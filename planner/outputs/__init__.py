"""Views of a plan result: JSON document, text tables, reports, launch settings."""
