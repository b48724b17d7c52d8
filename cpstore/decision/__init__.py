"""Deciding about a replay: the findings table, the verdict, the checks, validate and the gates."""
