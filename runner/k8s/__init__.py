"""Kubernetes side of attested-replay: build replay Jobs, submit them, track many at once.

* :mod:`runner.k8s.job` builds the Job object (pure: a dict in the API's wire form).
* :mod:`runner.k8s.submit` creates Jobs idempotently and collects verified envelopes.
* :mod:`runner.k8s.watch` tracks any number of runs with one Job watch and one Pod watch.
* :mod:`runner.k8s.kustomize` renders the ``k8s/`` overlays (a documented kustomize subset).
"""
