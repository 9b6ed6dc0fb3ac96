"""Data: synthetic tasks, parallel text, vocabularies and length-bucketed batching."""
