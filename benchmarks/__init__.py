"""Side-by-side benchmarks of contextfold and AgentScope 2.0.11 (issue 7).

Run ``python -m benchmarks all`` (or one figure: ``overhead``, ``accuracy``, ``offload``,
``retention``, ``cache``, ``memory``); ``--quick`` runs a smaller version of each. Needs the
``bench`` optional dependency group (``agentscope==2.0.11``); the library itself does not
depend on AgentScope.
"""
