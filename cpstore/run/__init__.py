"""The run model and run documents (JSON/msgpack)."""
