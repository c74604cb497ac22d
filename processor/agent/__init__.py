"""Closing the agent loop: what became of a turn's calls, told back to the model.

- :mod:`processor.agent.outcomes` — pure: the worker's and the executor's records of one turn
  (``status``, ``ledger``, ``results``, the turn's binding on ``audit``) folded into each call's
  settled :class:`~processor.agent.outcomes.Outcome`;
- :mod:`processor.agent.messages` — pure: outcomes as each provider's own tool-result messages;
- :mod:`processor.agent.follower` — the Kafka shell: one ``read_committed`` consumer that follows
  many turns at once (:class:`~processor.agent.follower.OutcomeFollower`, and its blocking form).

The first two import no Kafka and no asyncio (an import-linter contract says so).
"""
