"""Encodings every hashed or signed document goes through: RFC 8785 canonical JSON and the
strict JSON reader of the verifier's input documents."""
