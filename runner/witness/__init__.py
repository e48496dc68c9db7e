"""A witness of publication logs (C2SP tlog-witness): ``attested-replay witness serve``.

Another party than the operator runs it with its own Ed25519 key and state. For each log it
follows it remembers the latest checkpoint it cosigned, and cosigns a new one only when a
consistency proof shows that it extends that one (:mod:`runner.witness.protocol`); the check
and the update are one transaction (:mod:`runner.witness.store`), so it never cosigns two
roots for one size, across concurrent requests, restarts and crashes.
"""
