"""The store: LMDB environment and tables, recorder, reader, audit, verify, retention, refs."""
