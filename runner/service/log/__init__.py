"""The publication log as a component of its own: storage (SQLite or PostgreSQL), batch
sequencing with group commit, checkpoint signing, the head journal and the shard-set rule.
The service (:mod:`runner.service`) reaches it through :class:`sequencer.Log` only."""
