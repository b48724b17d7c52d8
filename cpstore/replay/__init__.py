"""Replaying a recorded run: token cursor, pinned observations, ledger guard, session."""
