"""Test-suite plugins: the Kafka broker fixtures (see tests/kafka_broker.py) and the slow
scenarios driven side by side (tests/side_by_side.py).

hypothesis is imported here, first: the processor raises the recursion limit when it loads a
registry (processor/cli/recursion.py), and CPython 3.11's parser fails with "AST constructor
recursion depth mismatch" when pytest's assertion rewriter first parses a module after that,
which the hypothesis plugin's end-of-session summary did when a run had imported no hypothesis
test (e.g. two executor test files alone).
"""

import hypothesis  # noqa: F401  (see above)

pytest_plugins = ["tests.kafka_broker", "tests.side_by_side"]
