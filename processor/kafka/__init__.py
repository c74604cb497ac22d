"""The Kafka plumbing every process here shares: clients, topics, producers, transactions.

What the worker (:mod:`processor.runtime`), the executors (:mod:`processor.executor`,
:mod:`processor.mcp`), the operators' commands (:mod:`processor.ops`, :mod:`processor.cli`) and
the SDK tees (:mod:`processor.integrations`) all take from one place, and none of them owns:

* :mod:`~processor.kafka.clients`: building aiokafka consumers, producers and admin clients from
  the settings, reading a topic to its end, discarding a producer;
* :mod:`~processor.kafka.topics`: the deployment's topics, creating and checking them;
  :mod:`~processor.kafka.acls`: the ACLs each principal needs;
* :mod:`~processor.kafka.partitioner`: the key → partition rule every producer must share;
* :mod:`~processor.kafka.codec`: headers (``traceparent``) and outbound records;
* :mod:`~processor.kafka.idempotent`, :mod:`~processor.kafka.publish`,
  :mod:`~processor.kafka.background`: the idempotent producer and the publishers the adapters'
  fragments go out through;
* :mod:`~processor.kafka.owner_fence`: becoming a transactional id's one owner (the previous
  transaction's state, a bounded InitProducerId, commits in doubt), used by the worker's
  partitions and the executor alike; :mod:`~processor.kafka.hanging`,
  :mod:`~processor.kafka.txn_admin`, :mod:`~processor.kafka.txn_remedies`: hanging and open
  transactions, found and ended;
* :mod:`~processor.kafka.tail`: following a topic for the operator;
  :mod:`~processor.kafka.reachability`: waiting for a broker and noticing it gone.

Nothing here decides about a call: no registry, no fence, no Assembler. It sits above the sans-IO
core and the adapters, below the worker and the executors (the ``layers`` contract in
``pyproject.toml``).
"""
